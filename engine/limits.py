"""Limits every layer shares."""

MAX_ROWS = 64   # verify rows one window may use, root included: the largest graph bucket
