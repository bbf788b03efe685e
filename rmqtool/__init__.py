"""rmqtool: offline forensic and repair tool for Apache RocketMQ broker stores."""
__version__ = "0.1.0"
