"""Measuring runs and models: timing, memory, FLOPs, hardware."""
