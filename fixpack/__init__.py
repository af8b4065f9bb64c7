"""fixpack: apply verified source fixes to an installed vLLM and vllm-gaudi, all or nothing."""

__version__ = "0.1.0"
