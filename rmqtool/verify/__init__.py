"""`rmqtool verify`: findings, never exceptions, over every file kind of a store."""
from rmqtool.verify.findings import CHECKS, Finding, FindingSink
from rmqtool.verify.runner import KINDS, VerifyOptions, VerifyReport, verify

__all__ = ["CHECKS", "Finding", "FindingSink", "KINDS", "VerifyOptions", "VerifyReport", "verify"]
