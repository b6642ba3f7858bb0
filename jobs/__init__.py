"""Spark entry points: the streaming watermark controller and scheduled batch jobs."""
