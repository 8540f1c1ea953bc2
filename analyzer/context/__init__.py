"""What every command of a run shares: its settings (arguments and pyproject), source paths as reports
show them, suppressions applied across the run.
"""
