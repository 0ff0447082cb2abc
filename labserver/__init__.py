"""labserver: hands-on workshops on LLM and video-model inference optimization for Ascend NPUs."""

__version__ = "0.1.0"
