"""Sweeps: `--trials`, independent trainings side by side, one world of the host's chips each (`sweep.py`)."""
