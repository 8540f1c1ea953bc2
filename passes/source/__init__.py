"""Source attribution: a program's stack frames read as the user's line, library frames as context,
and who owns which file (first-party or library).
"""
