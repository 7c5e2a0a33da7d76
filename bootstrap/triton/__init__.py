"""Triton + TensorRT-LLM model repositories: render, check, load, deploy."""
