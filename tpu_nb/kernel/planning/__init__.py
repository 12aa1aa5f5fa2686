"""Before anything starts: every option declared once (`declared_options`), read and checked (`options`),
the checks against the runtime (`preflight`), the workers' environment (`worker_environment`), each trial's chips
(`worlds`), the checkpoint plan (`checkpoint_plans`) and the deadline (`deadlines`).
"""
