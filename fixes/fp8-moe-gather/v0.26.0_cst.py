"""fp8-moe-gather's vllm_gaudi/envs.py change: three variables appended to the TYPE_CHECKING
declarations and to environment_variables. Anchored on those two places, not on the lines around
them, so it lands after whatever variables upstream adds there."""

from fixpack.transforms import Transform, add_entries, append_to

TRANSFORMS = [
    Transform(
        path="vllm_gaudi/envs.py",
        edits=[
            append_to(
                "",
                """
                VLLM_HPU_MOE_GATHER: bool = False
                VLLM_HPU_MOE_GATHER_RATIO: float = 1.0
                VLLM_HPU_MOE_GATHER_VERIFY: bool = False
                """,
                block="if TYPE_CHECKING:",
            ),
            add_entries(
                "environment_variables",
                """

                # EXPERIMENTAL gathered-expert FP8 MoE (silu, channel-FP8 weights) for
                # low-batch decode: compute only the routed local experts instead of the
                # stock fused op. Used while tokens * top_k <= RATIO * local experts (per
                # card); above that, or for other weight layouts, the stock op runs.
                "VLLM_HPU_MOE_GATHER":
                lambda: os.environ.get("VLLM_HPU_MOE_GATHER", "0").lower() in ("1", "true"),
                "VLLM_HPU_MOE_GATHER_RATIO":
                lambda: float(os.environ.get("VLLM_HPU_MOE_GATHER_RATIO", "1.0")),
                # With VLLM_HPU_MOE_GATHER: also run the stock op on every gathered call and
                # log the largest difference per token count (validation only, slow).
                "VLLM_HPU_MOE_GATHER_VERIFY":
                lambda: os.environ.get("VLLM_HPU_MOE_GATHER_VERIFY", "0").lower() in ("1", "true"),
                """,
            ),
        ],
    ),
]
