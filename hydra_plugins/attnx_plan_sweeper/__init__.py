"""`hydra/sweeper=plan`: a sweep of exactly the jobs a plan file lists (plan_sweeper.py)."""
