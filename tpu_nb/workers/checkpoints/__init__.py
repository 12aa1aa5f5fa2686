"""Checkpoints from inside the workers: saved in the background (`saving`), written to their place (`files`), their
contents gathered (`contents`), read and checked (`checks`), and XLA's random seed kept through them (`xla_seed`).
"""
