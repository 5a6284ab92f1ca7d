"""The straggler of a job read from its rank traces.

``who`` names the ranks the others waited for, ``cause`` says why and ``finding`` makes the
finding with its fixes.
"""
