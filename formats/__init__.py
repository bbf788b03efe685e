"""Byte layouts of an Apache RocketMQ broker store, declared once in construct's spelling (``formats.declare``).

Each module declares one file kind. Nothing here does I/O. Bulk readers derive
numpy dtypes and field offsets from these declarations (see ``formats.derive``)
instead of restating them.
"""

#: a Java int's largest value: a mapped file's size and every position in it (CommitLog, ConsumeQueue,
#: BatchConsumeQueue, IndexFile, timer log) are Java ints, so no readable file of those kinds is larger
JAVA_INT_MAX = (1 << 31) - 1
