"""seeded-sampling's vllm_gaudi/patches.py change: the random_sample replacement, its note in the
module docstring, and its call in the load_general_plugins hook. Anchored on the docstring, the
function it follows and the hook's body, so that patches upstream adds beside it do not move it."""

from fixpack.transforms import Transform, add_function, append_to, extend_docstring

TRANSFORMS = [
    Transform(
        path="vllm_gaudi/patches.py",
        edits=[
            extend_docstring(
                "",
                """

                * ``vllm.v1.sample.ops.topk_topp_sampler.random_sample`` — upstream draws the
                  noise of each seeded request in place on its row of the device tensor
                  (``q[i].exponential_(generator=g)``) with the request's own generator.  With
                  per-request HPU generators this segfaults in lazy mode, so the model runner
                  creates CPU generators, and the replacement draws the seeded rows on the CPU
                  (the values upstream draws on CPU) and copies them in with one
                  ``index_copy_``.  Unseeded rows are drawn as before.
                """,
            ),
            add_function(
                '''
                def _hpu_random_sample(
                    probs: torch.Tensor,
                    generators: dict[int, torch.Generator],
                    use_fp64_gumbel: bool = False,
                ) -> torch.Tensor:
                    """HPU replacement for ``topk_topp_sampler.random_sample``.

                    Seeded requests carry CPU generators (``HPUModelRunner._update_states``).
                    Their rows of exponential noise are drawn on the CPU, one row per
                    generator as upstream does, and copied into the device tensor with a single
                    ``index_copy_`` instead of one in-place ``exponential_`` per row view.
                    """
                    import vllm.v1.sample.ops.topk_topp_sampler as _tts

                    q = _tts.empty_exponential_noise_like(probs, use_fp64_gumbel)
                    if len(generators) != probs.shape[0]:
                        q.exponential_()
                    if generators:
                        noise = torch.empty((len(generators), q.shape[1]), dtype=q.dtype, device="cpu")
                        for j, generator in enumerate(generators.values()):
                            noise[j].exponential_(generator=generator)
                        rows = torch.tensor(list(generators), device=q.device)
                        q.index_copy_(0, rows, noise.to(q.device))
                    return _tts.sample_with_exponential_noise(probs, q)
                ''',
                after="_patch_batched_count_greater_than",
            ),
            add_function(
                '''
                def _patch_random_sample() -> None:
                    """Replace ``random_sample``, called by ``TopKTopPSampler.forward_native``
                    (the HPU path)."""
                    import vllm.v1.sample.ops.topk_topp_sampler as _tts

                    _tts.random_sample = _hpu_random_sample
                ''',
                after="_hpu_random_sample",
            ),
            append_to("apply._load_general_with_hpu_patches", "_patch_random_sample()"),
        ],
    ),
]
