"""Small tools every room uses: files written whole (`atomic_write`), where files go (`locations`), durations and
sizes as typed and written (`units`), signals that reach only the process they mean (`signals`), and which process a
file was made for (`owners`). They know nothing of runs; only `signals` and `owners` read the machine, through
`tpu_nb.runtime`'s view of it.
"""
