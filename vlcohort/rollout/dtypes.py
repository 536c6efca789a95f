"""The dtype a vLLM engine serves in, and the run header's lines on it. A leaf module (no
vlcohort imports): the engine (``rollout/vllm.py``) and the run header
(``vlcohort/run_header.py``) both read it, and neither may import the other's side."""

from __future__ import annotations

#: Placeholder for a dtype only the checkpoint knows (``agents.N.dtype=auto``), in the run
#: header, which is printed before any model is loaded.
CHECKPOINT_DTYPE = "checkpoint-dtype"


def engine_dtype(requested: str, policy: str) -> str:
    """The dtype a vLLM engine runs in: ``rollout.vllm.dtype``, where ``auto`` is the policy's
    own training dtype ``policy`` (``float32``, ``bfloat16``, ...).

    Why the policy's and not vLLM's own ``auto``: vLLM serves a float32 checkpoint in 16
    bit, so an fp32 policy would sample from a rounded copy of itself (its rollout
    log-probs off by 1e-3 to 1e-2 per token, which the IS correction then has to absorb)
    and every weight push would round the policy again. In the policy's dtype the engine's
    log-probs are the policy's to kernel rounding and a push copies the weights exactly; a
    16-bit engine for an fp32 policy (faster, less memory) is asked for by name."""
    return policy if requested == "auto" else requested


def rollout_header(engine: str, vllm_dtype: str, agents: list[tuple[str, str]]) -> list[str]:
    """The run header's lines on the rollout engine (empty for ``hf``, which samples from the
    policy itself): ``# rollout: vllm (bfloat16 engine, float32 policy)``, one entry per
    agent when their dtypes differ, and one line when an engine's dtype is not its policy's
    (said once here rather than by vLLM once per tensor at every weight push).

    ``vllm_dtype``: ``rollout.vllm.dtype``; ``agents``: ``(name, agents.N.dtype)`` pairs."""
    if engine != "vllm":
        return []
    pairs = []
    for name, dtype in agents:
        policy = CHECKPOINT_DTYPE if dtype == "auto" else dtype
        pairs.append((name, engine_dtype(vllm_dtype, policy), policy))
    if len({(e, p) for _, e, p in pairs}) == 1:
        described = f"{pairs[0][1]} engine, {pairs[0][2]} policy"
    else:
        described = "; ".join(f"{n}: {e} engine, {p} policy" for n, e, p in pairs)
    lines = [f"# rollout: vllm ({described})"]
    differ = sorted({p for _, e, p in pairs if e != p and p != CHECKPOINT_DTYPE})
    if differ:
        lines.append(f"#   rollout.vllm.dtype={vllm_dtype} is not the policy's {', '.join(differ)}: "
                     "rollout log-probs differ from the policy's (is/rollout_k3); "
                     "rollout.vllm.dtype=auto runs the engine in the policy's dtype")
    return lines
