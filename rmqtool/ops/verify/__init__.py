"""`rmqtool verify`: findings, never exceptions, over every file kind of a store."""
from rmqtool.ops.verify.findings import CHECKS, Finding, FindingSink
from rmqtool.ops.verify.runner import KINDS, VerifyOptions, VerifyReport, verify, verify_stores

__all__ = ["CHECKS", "Finding", "FindingSink", "KINDS", "VerifyOptions", "VerifyReport", "verify", "verify_stores"]
