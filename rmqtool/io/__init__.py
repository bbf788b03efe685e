"""File access: read-only readers of store files, segments, the store model, liveness, safe topic
paths, the store lock, and the one crash-safe install (temp, fsync, swap, backup)."""
