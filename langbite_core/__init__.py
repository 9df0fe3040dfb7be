"""langbite_core: a framework-free engine that tests large language models for social bias."""

__version__ = "0.1.0"
