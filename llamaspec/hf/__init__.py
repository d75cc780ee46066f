"""The transformers backend: Hugging Face assisted generation, measured like the llama.cpp runs.

- ``llamaspec.hf.runner``: ``open_engine(options) -> TransformersEngine`` (the registry's
  ``"transformers"``), light to import; torch and transformers are imported when it is opened.
- ``llamaspec.hf.models``: ``resolve_model(name, variant) -> ModelPath``: a catalog model's
  ``hf`` variant (the checkpoint in the Hugging Face cache, fetched with huggingface_hub; a PEFT
  adapter with its base) or one of its GGUF variants (which transformers dequantizes).
- ``llamaspec.hf.generation``: the torch-side pieces (loading, the timing streamer, the
  candidate-generator subclass that counts drafted and accepted tokens per round).

Install with ``pip install 'llamaspec[hf]'``.
"""
