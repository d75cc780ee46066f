"""Chat prompts: a GGUF's chat facts, the template rendered as llama-server renders it, the prompt
given to the command-line programs and their echo of it cut off, on every engine the earlier turns.

The recordings (``fixtures/llamacpp/0c1e570/chat/``, its ``record.py``) are real: the programs on two
chats, llama-server's own rendering and token ids of the same messages, the target's chat facts.
The real binaries run at the end (``llamacpp``, ``slow``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fakes import FIXTURES, fake_bin_dir

from llamaspec.base.errors import LlamaspecError
from llamaspec.llamacpp import build, modeltools, parse
from llamaspec.llamacpp import chat as templates
from llamaspec.llamacpp.prompting import generated_part, served_prompt
from llamaspec.llamacpp.runner import LlamaCppEngine
from llamaspec.measure import chat
from llamaspec.measure.contract import Measurement, Message, ModelPath, ResolvedCase
from llamaspec.measure.settings import Settings
from llamaspec.measure.summary import compare_outputs
from llamaspec.models import reader
from llamaspec.models.reader import ChatFacts

REC = FIXTURES / "0c1e570" / "chat"
FACTS = ChatFacts(**{k: tuple(v) if isinstance(v, list) else v
                     for k, v in json.loads((REC / "facts.json").read_text())["facts"].items()})
SERVER = json.loads((REC / "server.json").read_text())
PROGRAMS = ("completion", "speculative", "speculative-simple")


def turns_of(name: str) -> tuple[tuple[Message, ...], str]:
    """A recorded chat's earlier turns and its prompt."""
    messages = [(m["role"], m["content"]) for m in SERVER[name]["messages"]]
    return tuple(messages[:-1]), messages[-1][1]


def chat_case(name: str = "one-turn", target: str = "/m/smollm2-f32.gguf", **settings: Any) -> ResolvedCase:
    history, prompt = turns_of(name)
    s = Settings(**{"n_predict": 48, "threads": 1, "draft_max": 4, "seed": 20, "temperature": 0.0, **settings}).with_defaults()
    return ResolvedCase("e", name, ModelPath("smollm2-135m:f32", target), ModelPath("smollm2-135m:q4_1", "/m/q4_1.gguf"),
                        prompt, None, s, chat=True, history=history)


@pytest.fixture
def recorded_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded SmolLM2 target's chat facts, for a target that is a name here."""
    monkeypatch.setattr(reader, "read_chat", lambda path: FACTS)


def output(chat_name: str, program: str) -> str:
    stdout = (REC / f"{chat_name}-{program}.stdout").read_text()
    stderr = (REC / f"{chat_name}-{program}.stderr").read_text()
    read = parse.parse_completion if program == "completion" else parse.parse_speculative
    return str(read(stdout, stderr).text)


# --- the facts of a GGUF file --------------------------------------------------------------------

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


def chat_gguf(path: Path, tokens: list[str], types: list[int], *, model: str = "gpt2", template: str | None = None,
              tool_use: str | None = None, bos: int | None = None, eos: int | None = None, add_bos: bool | None = None,
              space_prefix: bool | None = None, name: str = "tiny") -> Path:
    """A GGUF header with a vocabulary and a chat template (no tensors: the facts need none)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if template is not None:
        writer.add_chat_template(template)
    if tool_use is not None:
        writer.add_string("tokenizer.chat_template.tool_use", tool_use)
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eos is not None:
        writer.add_eos_token_id(eos)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if space_prefix is not None:
        writer.add_add_space_prefix(space_prefix)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_chat_facts_read_the_template_the_token_texts_and_llama_cpps_overrides(tmp_path: Path) -> None:
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<tool>", "Ġhi", "a", "<|channel|>"]
    types = [UNKNOWN, CONTROL, CONTROL, CONTROL, NORMAL, USER_DEFINED, NORMAL, NORMAL, CONTROL]
    f = reader.read_chat(chat_gguf(tmp_path / "m.gguf", tokens, types, template="T", bos=1, eos=4, add_bos=True))
    assert (f.template, f.bos, f.eos, f.add_bos, f.add_eos) == ("T", "<s>", "<|im_end|>", True, False)
    # "<|im_end|>" is stored as a normal token: llama.cpp makes it a control token by its text;
    # gpt-oss's "<|channel|>" it always renders (user-defined), whatever the file says
    assert set(f.control) == {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"}
    assert set(f.special) == set(f.control) | {"<tool>", "<|channel|>"}
    assert [len(t) for t in f.control] == sorted((len(t) for t in f.control), reverse=True)  # longest first
    assert not f.space_prefix and not f.rstrip  # byte-level BPE; not a Phi-3
    # a normal token as BOS is its decoded text (byte-level BPE's "Ġ" is a space)
    assert reader.read_chat(chat_gguf(tmp_path / "n.gguf", tokens, types, bos=6)).bos == " hi"


def test_chat_facts_of_sentencepiece_phi3_and_a_tool_use_template(tmp_path: Path) -> None:
    tokens = ["<unk>", "<s>", "</s>", "<|user|>", "<|end|>", "▁hi", "<0x0A>"]
    types = [UNKNOWN, CONTROL, CONTROL, CONTROL, CONTROL, NORMAL, BYTE]
    spm = reader.read_chat(chat_gguf(tmp_path / "spm.gguf", tokens, types, model="llama", tool_use="U", bos=5))
    assert spm.template == "U" and spm.space_prefix and spm.bos == " hi"  # llama.cpp's fallback; SentencePiece's "▁"
    assert spm.add_bos  # SentencePiece's default, as llama.cpp loads it
    assert not reader.read_chat(chat_gguf(tmp_path / "np.gguf", tokens, types, model="llama", space_prefix=False)).space_prefix
    phi = reader.read_chat(chat_gguf(tmp_path / "phi.gguf", tokens, types, model="llama", name="Phi-3 mini"))
    assert set(phi.rstrip) == {"</s>", "<|user|>", "<|end|>"}  # not <unk> nor <s>
    assert reader.read_chat(chat_gguf(tmp_path / "none.gguf", tokens, types)).template is None


def test_chat_facts_are_read_once_per_file_as_it_is(tmp_path: Path) -> None:
    path = chat_gguf(tmp_path / "m.gguf", ["<s>", "a"], [CONTROL, NORMAL], template="one")
    first = reader.read_chat(path)
    assert reader.read_chat(path) is first
    chat_gguf(path, ["<s>", "a"], [CONTROL, NORMAL], template="another")
    os.utime(path, ns=(first_ns := path.stat().st_mtime_ns + 10**9, first_ns))
    assert reader.read_chat(path).template == "another"
    with pytest.raises(LlamaspecError, match="model file not found"):
        reader.read_chat(tmp_path / "gone.gguf")


# --- rendering ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SERVER))
def test_rendering_is_llama_servers_on_the_recorded_chats(name: str) -> None:
    history, prompt = turns_of(name)
    assert templates.render(FACTS, [*history, ("user", prompt)], "smollm2") == SERVER[name]["prompt"]


def facts(template: str, **changes: Any) -> ChatFacts:
    return dataclasses.replace(FACTS, template=template, **{"bos": "<s>", "eos": "</s>", **changes})


LISTING = "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}{{ eos_token }}"


def test_a_bos_text_the_vocabulary_adds_itself_is_dropped_as_llama_cpp_drops_it() -> None:
    one = [("user", "Hi")]
    assert templates.render(facts(LISTING), one, "m") == "<s>user:Hi|</s>"
    assert templates.render(facts(LISTING, add_bos=True), one, "m") == "user:Hi|</s>"  # the tokenizer adds it
    assert templates.render(facts(LISTING, add_bos=True, add_eos=True), one, "m") == "user:Hi|"


def test_a_system_turn_the_template_ignores_is_merged_into_the_next_or_dropped() -> None:
    no_system = facts("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
                      "{% endif %}{{ m.role }}:{{ m.content }}|{% endfor %}")
    assert templates.render(no_system, [("system", "Be brief."), ("user", "Hi")], "m") == "user:Be brief.\nHi|"
    assert templates.render(no_system, [("system", "Be brief.")], "m") == ""
    assert templates.render(facts(LISTING), [("system", "S"), ("user", "Hi")], "m") == "<s>system:S|user:Hi|</s>"
    assert templates.render(facts(LISTING), [("developer", "D"), ("user", "Hi")], "m") == "<s>system:D|user:Hi|</s>"


def test_the_template_environment_is_hugging_faces() -> None:
    source = ("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{% generation %}{{ m.content }}"
              "{% endgeneration %}{% endfor %}\n{{ messages[0] | tojson }} {{ strftime_now('%Y') | length }}"
              "{% if add_generation_prompt %} go{% endif %}{% if enable_thinking %} think{% endif %}")
    got = templates.render(facts(source), [("user", "é"), ("user", "never")], "m")
    assert got == 'é{"role": "user", "content": "é"} 4 go think'  # trim_blocks ate the newline after endfor


@pytest.mark.parametrize(("source", "says"), [
    ("{% for m in messages %}", "TemplateSyntaxError"),
    ("{{ raise_exception('Conversation roles must alternate') }}", "Conversation roles must alternate"),
    ("{{ messages[3].content.strip() }}", "UndefinedError"),
    ("{{ messages[0].content + 1 }}", "TypeError"),
    ("{{ ''.__class__ }}", ""),  # the sandbox: nothing of Python's inside
])
def test_a_template_that_does_not_render_is_one_error_with_a_hint(source: str, says: str) -> None:
    if not says:
        assert templates.render(facts(source), [("user", "Hi")], "m") == ""
        return
    with pytest.raises(LlamaspecError, match=f"m's chat template does not render: .*{says}") as info:
        templates.render(facts(source), [("user", "Hi")], "m")
    assert info.value.hint and "\n" not in info.value.message


# --- the echo of a chat prompt -----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SERVER))
def test_each_program_echoes_the_rendered_prompt_in_its_own_form(name: str) -> None:
    with_special, without = templates.echoes(FACTS, SERVER[name]["prompt"])
    assert with_special == SERVER[name]["prompt"]  # SmolLM2 adds no BOS: its pieces print the text back
    assert "<|im_start|>" not in without and "<|im_end|>" not in without
    for program in ("speculative", "speculative-simple"):
        assert output(name, program).startswith(with_special)
    assert output(name, "completion").startswith(without)
    assert not output(name, "completion").startswith(with_special)


@pytest.mark.usefixtures("recorded_facts")
@pytest.mark.parametrize("name", sorted(SERVER))
def test_generated_part_cuts_both_echoes_and_the_outputs_compare_identical(name: str) -> None:
    c = chat_case(name)
    parts = {p: generated_part(output(name, p), c) for p in PROGRAMS}
    assert all(found for _, found in parts.values())
    base = parts["completion"][0]
    assert base and parts["speculative-simple"][0] == base
    # llama-speculative prints the end-of-turn piece, and the drafted tokens it accepted past it
    assert parts["speculative"][0].startswith(base + "<|im_end|>")
    baseline = Measurement("baseline", True, None, (), 0, 1.0, None, "", text=base, end_of_text=True)
    for program in ("speculative", "speculative-simple"):
        spec = Measurement("speculative", True, None, (), 0, 1.0, None, "", text=parts[program][0], end_of_text=True)
        assert compare_outputs(spec, baseline).verdict == "identical"


@pytest.mark.usefixtures("recorded_facts")
def test_a_changed_generation_or_another_chats_output_is_not_passed() -> None:
    c = chat_case("one-turn")
    base = Measurement("baseline", True, None, (), 0, 1.0, None, "",
                       text=generated_part(output("one-turn", "completion"), c)[0], end_of_text=True)
    changed = output("one-turn", "speculative-simple").replace("Yellow", "Green")
    spec = Measurement("speculative", True, None, (), 0, 1.0, None, "", text=generated_part(changed, c)[0], end_of_text=True)
    assert compare_outputs(spec, base).verdict == "differs"
    # the other chat's output: no echo of this prompt in it, left whole, and it differs
    other, found = generated_part(output("multi-turn", "speculative-simple"), c)
    assert not found and other == output("multi-turn", "speculative-simple")
    wrong = Measurement("speculative", True, None, (), 0, 1.0, None, "", text=other, end_of_text=True)
    assert compare_outputs(wrong, base).verdict == "differs"


def test_without_the_control_texts_llama_completions_echo_is_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "read_chat", lambda path: dataclasses.replace(FACTS, control=(), special=()))
    c = chat_case("one-turn")
    assert generated_part(output("one-turn", "completion"), c) == (output("one-turn", "completion"), False)
    assert generated_part(output("one-turn", "speculative-simple"), c)[1]


def test_echoes_with_sentencepieces_space_prefix_and_phi3s_stripped_whitespace() -> None:
    llama2 = ChatFacts(template="T", bos="<s>", eos="</s>", add_bos=True, add_eos=False, control=("</s>", "<s>"),
                       special=("</s>", "<s>"), space_prefix=True)
    prompt = "[INST] Hi [/INST] Hello</s><s>[INST] Bye [/INST]"
    assert templates.echoes(llama2, prompt) == ("<s> [INST] Hi [/INST] Hello</s><s> [INST] Bye [/INST]",
                                                " [INST] Hi [/INST] Hello [INST] Bye [/INST]")
    phi3 = ChatFacts(template="T", bos="<s>", eos="<|endoftext|>", add_bos=False, add_eos=False,
                     control=("<|assistant|>", "<|user|>", "<|end|>"), special=("<|assistant|>", "<|user|>", "<|end|>"),
                     rstrip=("<|assistant|>", "<|user|>", "<|end|>"), space_prefix=True)
    assert templates.echoes(phi3, "<|user|>\nHi  there<|end|>\n<|assistant|>\n") == ("<|user|> Hi  there<|end|><|assistant|>",
                                                                                   " Hi  there")


# --- the llama.cpp programs' command lines ----------------------------------------------------

@pytest.fixture
def engine(tmp_path: Path) -> LlamaCppEngine:
    return LlamaCppEngine(build.prebuilt(fake_bin_dir(tmp_path / "bin")))


@pytest.mark.usefixtures("recorded_facts")
def test_a_chat_case_gives_both_programs_the_rendered_chat_as_p_without_escapes(engine: LlamaCppEngine,
                                                                                 tmp_path: Path) -> None:
    c = dataclasses.replace(chat_case("multi-turn"), prompt="Print a\\nb in Python.")
    rendered = templates.render(FACTS, [*c.history, ("user", "Print a\\nb in Python.")], "m")
    assert "a\\nb" in rendered  # as written: a chat client sends its text as JSON, escapes and all
    for mode in ("baseline", "speculative"):
        argv = engine.argv(c, mode)
        assert argv[argv.index("-p") + 1] == rendered and "--no-escape" in argv and "-e" not in argv
    from_file = tmp_path / "prompt.txt"
    from_file.write_text("Name three primary colors.")
    in_file = dataclasses.replace(chat_case("one-turn"), prompt=None, prompt_file=str(from_file))
    argv = engine.argv(in_file, "baseline")
    assert "-f" not in argv and argv[argv.index("-p") + 1] == SERVER["one-turn"]["prompt"]
    raw = dataclasses.replace(c, chat=False, history=())
    argv = engine.argv(raw, "baseline")
    assert argv[argv.index("-p") + 1] == "Print a\\nb in Python." and "-e" in argv  # a raw prompt: as before
    assert served_prompt(raw).form == chat.RAW and served_prompt(c).form == chat.CHAT_TEMPLATE


def test_a_model_without_a_chat_template_gets_the_chat_as_plain_text_and_one_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    monkeypatch.setattr(reader, "read_chat", lambda path: dataclasses.replace(FACTS, template=None))
    target = ModelPath(f"base-model-{tmp_path.name}", str(tmp_path / "base.gguf"))  # warned about once per process
    with caplog.at_level(logging.WARNING):
        multi = served_prompt(dataclasses.replace(chat_case("multi-turn"), case="a", target=target))
        single = served_prompt(dataclasses.replace(chat_case("one-turn"), case="b", target=target))
    assert multi.text == ("System: You answer in one short sentence.\nUser: What is 2 + 2?\nAssistant: 2 + 2 = 4.\n"
                          "User: And what is 3 + 3?")
    assert single.text == "Name three primary colors." and single.form == multi.form == chat.RAW_NO_TEMPLATE
    warned = [r for r in caplog.records if "has no chat template" in r.getMessage()]
    assert len(warned) == 1 and target.label in warned[0].getMessage()


@pytest.mark.usefixtures("recorded_facts")
def test_a_chat_run_on_the_recorded_programs_is_identical_and_says_how_its_prompt_was_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaspec.store.results import Store
    from llamaspec.studies.run import run_case

    monkeypatch.setattr("llamaspec.models.check_pair", lambda t, d: None)  # the model files are names here
    bins = fake_bin_dir(tmp_path / "bin", speculative_recording="chat/one-turn-speculative",
                        completion_recording="chat/one-turn-completion")
    result = run_case(chat_case("one-turn"), LlamaCppEngine(build.prebuilt(bins)), Store.open(tmp_path / "r.sqlite"),
                      hardware={"cpu": "test", "cores": 2})
    assert result.status == "ok" and result.summary.lossless.verdict == "identical"
    for m in result.measurements:
        assert m.stats["prompt_form"] == chat.CHAT_TEMPLATE and m.stats["prompt_echo_found"]
        assert m.n_prompt == len(SERVER["one-turn"]["tokens"])  # the tokens llama-server makes of the same messages


# --- the other engines: the whole chat -----------------------------------------------------------

def test_llama_server_renders_the_whole_chat_and_keys_its_cache_by_it() -> None:
    import threading

    from test_server import Offline

    from llamaspec.llamacpp import server

    posted: list[dict[str, Any]] = []

    class Base:
        """The target-only server's /apply-template: a text per request, so a wrong cache hit shows."""

        def post(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
            assert path == "/apply-template"
            posted.append(body)
            return {"prompt": f"rendered {len(posted)}"}

    engine = Offline()
    engine._lock, engine._rendered = threading.Lock(), {}
    engine.server_for = lambda case, mode: Base()  # type: ignore[method-assign]
    multi, single = chat_case("multi-turn"), dataclasses.replace(chat_case("multi-turn"), history=())
    assert engine.prompt_text(multi) == "rendered 1" and engine.prompt_text(single) == "rendered 2"
    assert engine.prompt_text(multi) == "rendered 1" and len(posted) == 2  # rendered once per chat
    assert posted[0]["messages"] == SERVER["multi-turn"]["messages"]
    assert server._prompt_key(multi) != server._prompt_key(single)


class Tokenizer:
    """A tokenizer that says what it was given."""

    def __init__(self, template: str | None) -> None:
        self.chat_template = template
        self.name_or_path = "tiny/chat-model"
        self.given: list[Any] = []

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool, return_tensors: str) -> str:
        self.given.append((messages, add_generation_prompt))
        return "templated"

    def __call__(self, text: str, return_tensors: str) -> SimpleNamespace:
        self.given.append(text)
        return SimpleNamespace(input_ids="plain")


def test_transformers_sends_the_whole_chat_as_written_or_plain_text_without_a_template() -> None:
    from llamaspec.hf.prompting import _input_ids, _prompt_form

    c = dataclasses.replace(chat_case("multi-turn"), prompt="Print a\\nb.")
    tok = Tokenizer("{{ messages }}")
    assert _input_ids(c, tok) == "templated" and _prompt_form(c, tok) == chat.CHAT_TEMPLATE
    assert tok.given == [([*SERVER["multi-turn"]["messages"][:-1], {"role": "user", "content": "Print a\\nb."}], True)]
    bare = Tokenizer(None)
    assert _input_ids(c, bare) == "plain" and _prompt_form(c, bare) == chat.RAW_NO_TEMPLATE
    assert bare.given == [chat.plain_text([*c.history, ("user", "Print a\\nb.")])]
    raw = dataclasses.replace(c, chat=False)
    _input_ids(raw, bare)
    assert bare.given[-1] == "Print a\nb." and _prompt_form(raw, bare) == chat.RAW  # escapes: raw prompts only


def test_the_transformers_deploy_snippet_sends_the_earlier_turns() -> None:
    from llamaspec.hf import deploy

    text = deploy.deployment(chat_case("multi-turn"), speculative=False).commands[0].text
    scope: dict[str, Any] = {"prompt": "P"}
    line = next(ln for ln in text.splitlines() if ln.startswith("messages = "))
    exec(line, scope)  # noqa: S102 - the snippet's own line, from our own code
    assert scope["messages"] == [*SERVER["multi-turn"]["messages"][:-1], {"role": "user", "content": "P"}]


# --- the real programs and server ----------------------------------------------------------------

# Characters a template or a tokenizer could mishandle: braces, a backslash, quotes, non-ASCII, newlines.
LIVE_CHATS: dict[str, list[Message]] = {
    "one-turn": [("user", "Write a short poem about the sea.")],
    "multi-turn": [("system", "You are terse."), ("user", 'Quote {this}: "a\\nb" — ok?'), ("assistant", "Done:\n{this}"),
                   ("user", "Now list three colours, one per line.")],
    # the run's: a few dozen tokens of answer from SmolLM2-135M
    "code": [("system", "You write Python."), ("user", "What is a list?"),
             ("assistant", "An ordered, changeable collection, such as [1, 2, 3]."),
             ("user", "Write a function that returns the sum of a list, with a docstring.")],
}


@pytest.fixture(scope="module")
def pinned(request: pytest.FixtureRequest) -> build.Build:
    """The pinned build with llama-server (conftest's llama_build), or LLAMASPEC_TEST_BIN_DIR's binaries."""
    bin_dir = os.environ.get("LLAMASPEC_TEST_BIN_DIR")
    return build.prebuilt(Path(bin_dir)) if bin_dir else request.getfixturevalue("llama_build")


@pytest.fixture(scope="module")
def pair(pinned: build.Build) -> tuple[Any, Any]:
    from llamaspec import models

    return models.resolve("smollm2-135m", "f32", tools=modeltools.tools(pinned)), models.resolve("smollm2-135m", "q4_1", tools=modeltools.tools(pinned))


@pytest.fixture(scope="module")
def jinja_server(pinned: build.Build, pair: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory):
    """llama-server --jinja on the target, as a chat deployment serves it."""
    from llamaspec.llamacpp.server_process import Server

    srv = Server(pinned.program("server"), ["-m", str(pair[0].path), "-t", "1", "-c", "1024", "--jinja", "--no-webui"],
                 tmp_path_factory.mktemp("chat-server") / "server.log", "chat")
    srv.start()
    yield srv
    srv.stop()


def served_tokens(srv: Any, text: str) -> list[int]:
    """The token ids llama-server makes of a prompt it is sent (special tokens added and parsed)."""
    return list(srv.post("/tokenize", {"content": text, "add_special": True, "parse_special": True}, timeout=60)["tokens"])


@pytest.mark.llamacpp
@pytest.mark.slow
def test_the_rendering_and_its_tokens_are_llama_servers(jinja_server: Any, pair: tuple[Any, Any]) -> None:
    facts = reader.read_chat(pair[0].path)
    assert facts == FACTS  # the recorded facts are this file's
    for name, turns in LIVE_CHATS.items():
        theirs = jinja_server.post("/apply-template", {"messages": chat.as_dicts(turns)}, timeout=60)["prompt"]
        ours = templates.render(facts, turns, "smollm2")
        assert ours == theirs, name
        assert served_tokens(jinja_server, ours) == served_tokens(jinja_server, theirs), name


@pytest.mark.llamacpp
@pytest.mark.slow
def test_a_chat_on_the_programs_is_lossless_and_counts_the_servers_tokens(pinned: build.Build, pair: tuple[Any, Any],
                                                                         jinja_server: Any, tmp_path: Path) -> None:
    turns = LIVE_CHATS["code"]
    expected = served_tokens(jinja_server, jinja_server.post("/apply-template", {"messages": chat.as_dicts(turns)},
                                                             timeout=60)["prompt"])
    engine = LlamaCppEngine(pinned)
    base = None
    for program in ("speculative", "speculative-simple"):
        s = Settings(n_predict=32, threads=1, seed=20, temperature=0.0, ctx_size=1024, draft_max=4,
                     program=program).with_defaults()
        c = ResolvedCase("chat-test", program, ModelPath("smollm2-135m:f32", str(pair[0].path)),
                         ModelPath("smollm2-135m:q4_1", str(pair[1].path)), turns[-1][1], None, s, chat=True,
                         history=tuple(turns[:-1]))
        engine.check(c)
        if base is None:
            base = engine.measure(c, "baseline", tmp_path / "baseline.log")
            assert base.ok, base.error
        spec = engine.measure(c, "speculative", tmp_path / f"{program}.log")
        assert spec.ok, spec.error
        for m in (base, spec):
            assert m.stats["prompt_form"] == chat.CHAT_TEMPLATE and m.stats["prompt_echo_found"], (program, m.mode)
            assert m.n_prompt == len(expected), (program, m.mode)
        assert base.text and len(base.text) > 20 and "<|im_start|>" not in base.text
        assert compare_outputs(spec, base).verdict == "identical", (program, spec.text, base.text)


# A Llama 2 style template: each user turn opens with the BOS text, each answer closes with the EOS text.
LLAMA2 = ("{% for m in messages %}{% if m.role == 'user' %}{{ bos_token }}[INST] {{ m.content }} [/INST]"
          "{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}")


@pytest.mark.llamacpp
@pytest.mark.slow
def test_a_sentencepiece_chat_with_bos_texts_inside_is_cut_off_both_programs_outputs(pinned: build.Build,
                                                                                     tmp_path: Path) -> None:
    """SentencePiece adds BOS itself and a space before the text after each special token: the
    rendered chat loses its leading BOS text, and each program's echo has those spaces."""
    from models_factory import tiny_gguf

    target = tiny_gguf(tmp_path / "t.gguf", chat_template=LLAMA2)
    draft = tiny_gguf(tmp_path / "d.gguf", seed=1, chat_template=LLAMA2)
    s = Settings(n_predict=4, threads=1, seed=20, temperature=0.0, ctx_size=128, draft_max=2).with_defaults()
    c = ResolvedCase("chat-test", "spm", ModelPath("tiny", str(target)), ModelPath("tiny-draft", str(draft)), "bye",
                     None, s, chat=True, history=(("user", "hi there"), ("assistant", "ok")))
    assert served_prompt(c).text == "[INST] hi there [/INST]ok</s><s>[INST] bye [/INST]"
    engine = LlamaCppEngine(pinned)
    engine.check(c)
    base = engine.measure(c, "baseline", tmp_path / "b.log")
    spec = engine.measure(c, "speculative", tmp_path / "s.log")
    assert base.ok and spec.ok, (base.error, spec.error)
    assert base.stats["prompt_echo_found"] and spec.stats["prompt_echo_found"]
    assert base.n_prompt == spec.n_prompt and compare_outputs(spec, base).verdict == "identical"
