"""Many ranks.

Collectives matched across ranks, the straggler and its cause, and the job-wide findings.
"""
