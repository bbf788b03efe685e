"""The library entry points: info, dump, locate, query, verify, rebuild, write, export."""
