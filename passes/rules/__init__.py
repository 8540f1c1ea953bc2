"""The rules: models/rule_codes.py names them, one file each holds a rule, table.py lists them all."""
