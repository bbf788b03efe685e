"""The message record's fixed parts as ``struct.Struct``s, derived once from formats.commitlog.

Every module that packs or unpacks a record field by field (the single-record decoder,
the encoder, the scan's prefix check, query-queue's spot reads) takes them from here.
"""
from __future__ import annotations

from formats import commitlog as cl
from formats.derive import field_struct, member_struct, struct_of

PREFIX = struct_of(cl.RecordPrefix)                    # TOTALSIZE, MAGICCODE
HEAD = struct_of(cl.MessageHead)                       # BODYCRC .. SYSFLAG, BORNTIMESTAMP
TAIL = struct_of(cl.MessageTail)                       # RECONSUMETIMES .. BODYLENGTH
PORT = field_struct(cl.HostV4.subcons[1])
STORE_TIMESTAMP = field_struct(cl.StoreTimestamp)
TOPIC_LEN_V1 = field_struct(cl.TopicLengthV1)
TOPIC_LEN_V2 = field_struct(cl.TopicLengthV2)
PROPERTIES_LEN = field_struct(cl.PropertiesLength)
PHYSICAL_OFFSET = member_struct(cl.MessageHead, "physical_offset")
SYS_FLAG = member_struct(cl.MessageHead, "sys_flag")
