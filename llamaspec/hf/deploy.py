"""The Python that deploys a measured transformers setting: the models loaded as the engine loads
them and ``generate()`` called with the keyword arguments the measurement used.

transformers reads the drafting settings (``num_assistant_tokens``, its schedule, the confidence
threshold) from the **assistant's** ``generation_config``, not from ``generate()``'s arguments
(candidate_generator.py, 4.57): passed to ``generate()`` they would be silently ignored, so the
snippet sets them there, as the engine does before each generation.
"""

from __future__ import annotations

from pathlib import Path

from llamaspec.hf import models as hf_models
from llamaspec.measure import chat, spectypes
from llamaspec.measure.contract import Command, Deployment, ModelPath, ResolvedCase

_ACCEL_DEVICE = {"cuda": "cuda", "metal": "mps", "cpu": "cpu"}


def _load(var: str, model: ModelPath, dtype: str, load_in: str, device: str) -> list[str]:
    fmt = hf_models.model_format(model)
    path = Path(model.path)
    args: list[str] = []
    tok_args: list[str] = []
    if fmt == "gguf":
        where = str(path.parent)
        args.append(f"gguf_file={path.name!r}")
        tok_args.append(f"gguf_file={path.name!r}")
    elif fmt == "peft-adapter":
        where = str(hf_models.base_path(model))
    else:
        where = str(path)
    if dtype != "auto":
        args.append(f"dtype=torch.{dtype}")
    elif fmt != "gguf":
        args.append('dtype="auto"')
    if load_in != "none":
        args.append(f"quantization_config=BitsAndBytesConfig(load_in_{load_in}=True)")
    if device != "cpu":
        args.append("device_map={'': device}")
    lines = [f"{var} = AutoModelForCausalLM.from_pretrained({', '.join([repr(where), *args])}).eval()"]
    if fmt == "peft-adapter":
        lines.append(f"{var} = PeftModel.from_pretrained({var}, {str(path)!r}).get_base_model()")
    lines.append(f"{var}_tokenizer = AutoTokenizer.from_pretrained({', '.join([repr(where), *tok_args])})")
    return lines


def deployment(case: ResolvedCase, accel: str = "auto", speculative: bool = True, device: str | None = None) -> Deployment:
    """``device``: where the engine ran it (None: from the case's device setting or ``accel``)."""
    s = case.settings.with_defaults()
    spec_type = s.spec_type or "draft"
    speculative = speculative and (case.draft is not None or spectypes.of(spec_type).draft_free)
    device = device or (s.device if s.device not in (None, "auto") else _ACCEL_DEVICE.get(accel))
    dtype = s.dtype or "auto"
    load_in = s.load_in or "none"
    # a chat's messages are sent as written (measure.chat); a raw prompt as every engine reads it
    prompt = chat.prompt_of(case)
    uses_draft = speculative and spectypes.needs_draft(spec_type) and case.draft is not None
    adapter = any(hf_models.model_format(m) == "peft-adapter" for m in (case.target, case.draft) if m is not None)
    lines = ["import torch", "from transformers import AutoModelForCausalLM, AutoTokenizer"
             + (", BitsAndBytesConfig" if load_in != "none" else "")]
    if adapter:
        lines.append("from peft import PeftModel")
    lines.append("")
    lines.append(f"device = {device!r}" if device else 'device = "cuda" if torch.cuda.is_available() else "cpu"')
    if s.threads and device in (None, "cpu"):
        lines.append(f"torch.set_num_threads({s.threads})")
    lines += _load("model", case.target, dtype, load_in, device or "auto")
    if uses_draft and case.draft is not None:
        lines += _load("assistant", case.draft, s.draft_dtype or dtype, "none", device or "auto")
        lines += ["# transformers reads these from the assistant's generation_config (not from generate()'s arguments)",
                  f"assistant.generation_config.num_assistant_tokens = {s.draft_max}",
                  f"assistant.generation_config.num_assistant_tokens_schedule = {s.draft_schedule or 'constant'!r}"]
        if s.draft_p_min is not None:
            lines.append(f"assistant.generation_config.assistant_confidence_threshold = {s.draft_p_min!r}")
    lines.append(f"prompt = {prompt!r}")
    if case.chat:
        turns = [*(repr(m) for m in chat.as_dicts(case.history)), "{'role': 'user', 'content': prompt}"]
        lines.append(f"messages = [{', '.join(turns)}]")
        lines.append("input_ids = model_tokenizer.apply_chat_template(messages, add_generation_prompt=True, "
                     "return_tensors='pt').to(model.device)")
    else:
        lines.append("input_ids = model_tokenizer(prompt, return_tensors='pt').input_ids.to(model.device)")
    kwargs = [f"max_new_tokens={s.n_predict}", f"do_sample={bool(s.temperature)}"]
    if s.temperature:
        lines.append(f"torch.manual_seed({s.seed})")
        kwargs.append(f"temperature={s.temperature!r}")
    if speculative and spec_type == "prompt-lookup":
        kwargs.append(f"prompt_lookup_num_tokens={s.draft_max}")
    elif uses_draft:
        kwargs.append("assistant_model=assistant")
        if s.universal_assisted:
            kwargs += ["tokenizer=model_tokenizer", "assistant_tokenizer=assistant_tokenizer"]
    lines += ["with torch.inference_mode():",
              f"    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), {', '.join(kwargs)})",
              "print(model_tokenizer.decode(out[0, input_ids.shape[1]:], skip_special_tokens=True))"]
    what = (f"no draft: the target {case.target.label} alone" if not speculative else f"prompt lookup {s.draft_max}" if spec_type == "prompt-lookup"
            else f"assistant {case.draft.label if case.draft else '?'}, {s.draft_max} tokens per round")
    note = "generate() keyword arguments: " + ", ".join(k.split("=")[0] for k in kwargs)
    if speculative:
        what += f" on the target {case.target.label}"
    return Deployment("transformers", speculative, what,
                      (Command("python", "\n".join(lines), (), note),))

