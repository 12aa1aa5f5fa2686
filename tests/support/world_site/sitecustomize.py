"""For simulated pod hosts only: a host's `python train.py` joins one process-per-device world with the other hosts.

The fake gcloud's hosts get this directory on PYTHONPATH and
TPU_NB_TEST_WORLD_HOSTS set (see `support.pods.simulate_slice`); any other
Python process started there is left alone.
"""

import os
import sys

if os.environ.get("TPU_NB_TEST_WORLD_HOSTS") and os.path.basename(sys.argv[0]) == "train.py":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/, for `support`
    from support.process_world import install

    install()
