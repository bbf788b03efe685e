"""Queries that match the broker: by key (IndexService), by message id, by queue offset/time.

``bykey`` walks IndexFiles like upstream IndexService and confirms every hit against
the CommitLog record; ``byid`` tells an offsetMsgId from a UNIQ_KEY; ``byqueue`` reads
ConsumeQueue units and reproduces upstream HEAD's getOffsetInQueueByTime.
"""
