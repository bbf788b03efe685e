"""Byte layouts of an Apache RocketMQ broker store, declared once with construct.

Each module declares one file kind. Nothing here does I/O. Bulk readers derive
numpy dtypes and field offsets from these declarations (see ``formats.derive``)
instead of restating them.
"""
