"""The recipes in ``configs/``: each loads and validates offline, is headed by launch
commands that run that very file on a world size its agent groups fill exactly, and the
baselines differ from their Co-RL recipe only in ``method``."""

from __future__ import annotations

import dataclasses
import shlex
import socket
from pathlib import Path

import pytest

from vlcohort.config import DEMO_RECIPE, default_config, load_config
from vlcohort.typed_yaml import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
RECIPES = [p for p in CONFIGS if p.name != "demo.yaml"]
# recipes that run in one process (their header says ``vlcohort train configs/<file>``)
SINGLE_PROCESS = {"self_play_tiny.yaml", "demo_vllm.yaml", "demo_qwen3vl_internvl.yaml",
                  "real_smollm2_gemma3_cpu.yaml", "comas_qwen25_3b_x4_comas7.yaml", "comas_tiny.yaml",
                  "maporl_tiny.yaml"}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Loading a recipe must not touch the network (hub ids are only strings until a run)."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access while loading a config: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def header(path: Path) -> list[str]:
    """The comment block at the top of a recipe, without the leading '#'."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return lines


def launch_commands(path: Path) -> list[list[str]]:
    """Every ``torchrun ...`` command in the header (backslash continuations joined)."""
    text = "\n".join(header(path)).replace("\\\n", " ")
    return [shlex.split(line[line.index("torchrun"):]) for line in text.splitlines()
            if line.startswith("torchrun")]


def option(argv: list[str], name: str, default: int | None = None) -> int | None:
    return int(argv[argv.index(name) + 1]) if name in argv else default


def overrides_of(argv: list[str]) -> list[str]:
    """The ``--set key=value`` and bare ``key=value`` overrides after the config file."""
    after = argv[argv.index("train") + 2:]
    out, i = [], 0
    while i < len(after):
        if after[i] == "--set":
            out.append(after[i + 1])
            i += 2
        else:
            out.append(after[i])
            i += 1
    return out


def test_there_are_recipes():
    names = {p.name for p in RECIPES}
    assert len(RECIPES) >= 8, names
    assert (ROOT / "configs" / "demo.yaml").resolve() == DEMO_RECIPE


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_loads_and_validates(path):
    cfg = load_config(path)
    assert cfg.agents and all(a.path for a in cfg.agents)


@pytest.mark.parametrize("path", sorted(p for p in RECIPES if p.name in SINGLE_PROCESS),
                         ids=lambda p: p.name)
def test_single_process_recipes_are_headed_by_their_command(path):
    assert not launch_commands(path), f"{path.name}: runs in one process, not under torchrun"
    assert any(line.split("#")[0].strip().endswith(f"vlcohort train configs/{path.name}")
               or f"vlcohort train configs/{path.name}" in line for line in header(path))


@pytest.mark.parametrize("path", [p for p in RECIPES if p.name not in SINGLE_PROCESS],
                         ids=lambda p: p.name)
def test_header_launches_this_file_on_a_world_its_agent_groups_fill(path):
    commands = launch_commands(path)
    assert commands, f"{path.name}: no torchrun launch command in the header"
    for argv in commands:
        assert argv[argv.index("-m") + 1:argv.index("-m") + 3] == ["vlcohort", "train"], argv
        assert argv[argv.index("train") + 1] == f"configs/{path.name}", \
            f"{path.name}: its launch command runs {argv[argv.index('train') + 1]}"
        world = option(argv, "--nproc_per_node") * option(argv, "--nnodes", 1)
        if option(argv, "--nnodes", 1) > 1:
            assert "--node_rank" in argv and "--master_addr" in argv, argv
        cfg = load_config(path, overrides_of(argv))  # the command's own overrides apply
        A, per_agent = len(cfg.agents), cfg.distributed.ranks_per_agent
        assert per_agent, f"{path.name}: set distributed.ranks_per_agent for a multi-GPU recipe"
        assert world == A * per_agent, (f"{path.name}: {' '.join(argv)} starts {world} ranks "
                                        f"but {A} agents x {per_agent} ranks need {A * per_agent}")
        tp = cfg.rollout.vllm.tensor_parallel_size
        assert per_agent % tp == 0


def test_header_check_catches_a_wrong_world(tmp_path):
    """The check above can fail: 8 ranks for 3 agents of 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("# torchrun --nproc_per_node 8 -m vlcohort train configs/bad.yaml\n"
                   "agents: [{name: A, path: x}, {name: B, path: y}, {name: C, path: z}]\n"
                   "distributed: {ranks_per_agent: 2}\n")
    (argv,) = launch_commands(bad)
    cfg = load_config(bad, overrides_of(argv))
    assert option(argv, "--nproc_per_node") != len(cfg.agents) * cfg.distributed.ranks_per_agent


BASELINES = {"ttrl_qwen25vl3b_internvl35_2b_mmr1.yaml": "ttrl",
             "gtreward_qwen25vl3b_internvl35_2b_mmr1.yaml": "gt_reward",
             "corewarding_qwen25vl3b_internvl35_2b_mmr1.yaml": "co_rewarding_ii"}


@pytest.mark.parametrize("name,method", sorted(BASELINES.items()))
def test_baselines_differ_from_co_rl_only_in_method(name, method):
    co_rl = dataclasses.asdict(load_config(ROOT / "configs" / "corl_qwen25vl3b_internvl35_2b_mmr1.yaml"))
    base = dataclasses.asdict(load_config(ROOT / "configs" / name))
    assert co_rl["method"] == "co_rl" and base["method"] == method
    differ = {k for k in co_rl if co_rl[k] != base[k]}
    # Co-rewarding-II's published run adds its KL towards the EMA teacher
    kl = {"kl_coef", "kl_kind", "kl_reference"} if method == "co_rewarding_ii" else set()
    assert differ == {"method", "reward", "run"} | ({"grpo"} if kl else set())
    assert {k for k in co_rl["grpo"] if co_rl["grpo"][k] != base["grpo"][k]} == kl
    assert {k for k in co_rl["reward"] if co_rl["reward"][k] != base["reward"][k]} == {"source"}
    assert {k for k in co_rl["run"] if co_rl["run"][k] != base["run"][k]} == {"name", "output_dir"}


def test_recipes_say_what_the_issue_asks():
    """Pairs, data, IS correction and topology of the paper's runs."""
    def cfg(name):
        return load_config(ROOT / "configs" / name)

    def paths(c):
        return [a.path for a in c.agents]

    mmr1 = cfg("corl_qwen25vl3b_internvl35_2b_mmr1.yaml")
    assert paths(mmr1) == ["Qwen/Qwen2.5-VL-3B-Instruct", "OpenGVLab/InternVL3_5-2B-HF"]
    assert (mmr1.data.source, mmr1.data.preset) == ("hub", "mmr1")
    assert cfg("corl_qwen25vl3b_internvl35_2b_openr1.yaml").data.preset == "open_r1"
    assert paths(cfg("corl_qwen25vl7b_internvl35_8b_openr1.yaml")) == [
        "Qwen/Qwen2.5-VL-7B-Instruct", "OpenGVLab/InternVL3_5-8B-HF"]
    gemma = cfg("corl_gemma3_12b_internvl35_8b_openr1.yaml")
    assert paths(gemma) == ["google/gemma-3-12b-it", "OpenGVLab/InternVL3_5-8B-HF"]
    assert gemma.grpo.is_mode != "off" and gemma.rollout.engine == "vllm"
    assert gemma.distributed.zero_stage == 3 and gemma.distributed.offload_optimizer
    text = cfg("corl_text_qwen25_3b_llama32_3b_math345.yaml")
    assert paths(text) == ["Qwen/Qwen2.5-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"]
    assert text.data.where == {"level": ["Level 3", "Level 4", "Level 5"]}
    assert text.data.preset == "math" and text.reward.answer_style == "boxed"
    ring = cfg("corl_ring_qwen25_3b_llama32_3b_qwen3_1_7b_math345.yaml")
    assert len(ring.agents) == 3 and ring.reward.topology == "ring"
    assert paths(ring)[:2] == paths(text) and ring.data == text.data
    for c in (mmr1, gemma, text, ring):
        assert c.agents[0].dtype == "bfloat16" and all(a.gradient_checkpointing for a in c.agents)
        assert c.method == "co_rl" and c.grpo.kl_coef == 0.0


PAPER_RECIPES = [p for p in RECIPES if p.name.startswith(("corl_", "ttrl_", "gtreward_", "corewarding_"))]


@pytest.mark.parametrize("path", PAPER_RECIPES, ids=lambda p: p.name)
def test_paper_recipes_name_their_vote_rules_and_ring(path):
    """Issue 14: each paper recipe writes its vote rules and ring direction as keys, with a
    comment saying whose rule it is (the published Co-RL code's tie and share rules, the paper's ring)."""
    lines = {line.split(":")[0].strip(): line for line in path.read_text().splitlines()
             if line.startswith("  ") and not line.startswith("    ")}
    for key in ("ring", "tie", "min_share", "min_share_of"):
        assert key in lines, f"{path.name}: reward.{key} is not written out"
    for key in ("ring", "tie", "min_share_of"):
        assert "#" in lines[key], f"{path.name}: reward.{key} has no comment saying whose rule"
    cfg = load_config(path)
    assert (cfg.reward.ring, cfg.reward.tie, cfg.reward.min_share_of) == ("previous", "first", "parsed")


def test_demo_config_still_loads():
    cfg = default_config()
    assert load_config(ROOT / "configs" / "demo.yaml") == cfg
    with pytest.raises(ConfigError, match="distributed.ranks_per_agent"):
        load_config(ROOT / "configs" / "demo.yaml", ["distributed.ranks_per_agent=-1"])


def test_agent_device_key():
    """``agents.N.device`` places a model; a GPU asked for where there is none is an error
    that names the key (never a silent CPU run)."""
    import torch

    from vlcohort.training.agent import resolve_device

    assert default_config(["agents.0.device=cuda:1"]).agents[0].device == "cuda:1"
    with pytest.raises(ConfigError, match=r"agents\.0\.device: 'gpu'; use cpu, cuda or cuda:N"):
        default_config(["agents.0.device=gpu"])
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"agents\.N\.device \(agent A\): 'cuda' asks "
                                               r"for a GPU but torch sees none"):
            resolve_device("cuda", "agents.N.device (agent A)")


def test_demo_vllm_is_the_demo_with_vllm_rollouts():
    """``base: demo.yaml`` then two sections: the rest is the demo's, key for key."""
    demo = dataclasses.asdict(load_config(DEMO_RECIPE))
    on_vllm = dataclasses.asdict(load_config(ROOT / "configs" / "demo_vllm.yaml"))
    assert {k for k in demo if demo[k] != on_vllm[k]} == {"rollout", "run"}
    assert {k for k in demo["rollout"] if demo["rollout"][k] != on_vllm["rollout"][k]} == \
        {"engine", "vllm"}
    assert on_vllm["rollout"]["engine"] == "vllm" and not on_vllm["rollout"]["vllm"]["sleep_mode"]
    assert {k for k in demo["run"] if demo["run"][k] != on_vllm["run"][k]} == {"name", "output_dir"}
    assert on_vllm["run"]["output_dir"] == "runs/demo_vllm"


def test_base_recipes_merge_and_bad_bases_are_clear_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("method: ttrl\nagents: [{name: A, path: 'tiny:qwen2'}]\n"
                                     "rollout: {prompts_per_step: 3, max_new_tokens: 9}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nrollout: {max_new_tokens: 5}\n")
    cfg = load_config(tmp_path / "b.yaml", ["rollout.prompts_per_step=4"])
    assert (cfg.rollout.prompts_per_step, cfg.rollout.max_new_tokens) == (4, 5)
    assert cfg.agents[0].path == "tiny:qwen2"
    (tmp_path / "c.yaml").write_text("base: d.yaml\n")
    (tmp_path / "d.yaml").write_text("base: c.yaml\n")
    with pytest.raises(ConfigError, match=r"c.yaml: base: d.yaml makes a circle|d.yaml: base: c.yaml makes a circle"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "e.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"e.yaml: base: nowhere.yaml not found"):
        load_config(tmp_path / "e.yaml")
    (tmp_path / "f.yaml").write_text("base: [a.yaml]\n")
    with pytest.raises(ConfigError, match="must be a path"):
        load_config(tmp_path / "f.yaml")


def test_mm_upt_recipe_has_its_published_settings():
    """MM-UPT's single-model majority-vote baseline: Qwen2.5-VL-7B alone on MMR1, its own
    vote, 512 prompts x 10 rollouts at temperature 0.7, KL in the loss, no IS correction."""
    c = load_config(ROOT / "configs" / "mmupt_qwen25vl7b_mmr1.yaml")
    assert [a.path for a in c.agents] == ["Qwen/Qwen2.5-VL-7B-Instruct"]
    assert (c.method, c.reward.source, c.reward.answer_style) == ("ttrl", "self_vote", "boxed")
    assert (c.data.preset, c.rollout.prompts_per_step, c.rollout.rollouts_per_prompt) == ("mmr1", 512, 10)
    assert (c.rollout.temperature, c.rollout.top_p, c.rollout.max_new_tokens) == (0.7, 0.99, 2048)
    assert (c.grpo.kl_coef, c.grpo.kl_kind, c.grpo.is_mode) == (0.01, "low_var_kl", "off")
    assert (c.grpo.clip_low, c.grpo.clip_high, c.grpo.clip_ratio_c) == (0.2, 0.3, 3.0)
    per_rank = c.rollout.prompts_per_step * c.rollout.rollouts_per_prompt // c.distributed.ranks_per_agent
    assert per_rank // c.grpo.mini_batch_seqs == 4  # four optimizer steps of 128 prompts x 10
    assert (c.optim.lr, c.optim.weight_decay, c.optim.schedule, c.run.steps) == (1e-6, 0.01, "constant", 165)
