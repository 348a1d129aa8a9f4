"""The sessionstore benchmark suite: ``python -m benchmarks`` (see ``docs/benchmarks.md``).

Every scenario times sessionstore ("ours") against a baseline doing the same work with
the bare driver or a peer library, on the same freshly started server in the same run,
alternating repetitions, and reports the median throughput of each side and their ratio
against a target. Speed is reported here, never asserted in the tests.
"""
