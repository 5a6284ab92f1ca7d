"""The terminal report of a Run, and the sentences the HTML report shares with it.

``run`` renders a Run (header, throughput, phases, devices, findings); ``trace`` an analyzed
trace's sections; ``anatomy``, ``efficiency`` and ``inference`` the job anatomy, energy and
MFU, and an inference trace's batching and weights, in a few lines each.
"""
