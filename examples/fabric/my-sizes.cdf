# Message sizes of my service: one "size probability" pair per line, the
# size in bytes, the probability that a flow is at most that size. Sizes
# and probabilities never decrease; the last probability is 1. A draw
# interpolates linearly between the points, starting from (0, 0).
1000 0.20
4000 0.70
16000 0.85
64000 0.95
256000 0.99
1000000 1.00
