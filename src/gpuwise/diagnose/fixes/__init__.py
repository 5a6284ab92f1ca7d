"""The fix catalog.

What each fix is (catalog, feed, inference), where it applies (scope) and how it is written in
the job's own terms (terms).
"""
