"""The run log: a record of every run beside the notebook (`log.py`), and `%tpu_runs`'s table and curves (`view.py`)."""
