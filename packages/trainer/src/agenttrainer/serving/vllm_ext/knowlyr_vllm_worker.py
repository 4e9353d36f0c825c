"""Methods knowlyr adds to vLLM's workers (``--worker-extension-cls knowlyr_vllm_worker.WeightSync``),
called over ``POST /collective_rpc``. This file is imported by the vLLM server's own interpreter
(its folder is put on PYTHONPATH, not agenttrainer): it imports nothing, not even vllm.
"""


class WeightSync:
    """Mixed into vLLM's worker class: ``self`` is the worker."""

    def knowlyr_reload_weights(self, weights_path: str) -> None:
        """Load the checkpoint at ``weights_path`` into the running model, in place.

        vLLM's own ``reload_weights`` leaves a tied LM head behind on a CPU: the head shares the
        embedding's parameter, but its GEMM kernel holds a packed copy of the old values, made
        when the model loaded, and the reload repacks only the layers whose weights it read (the
        checkpoint has no ``lm_head.weight`` when it is tied). So the head is repacked here.
        """
        self.reload_weights(weights_path=weights_path)
        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        method = getattr(head, "quant_method", None)
        if getattr(self.model_config.hf_config, "tie_word_embeddings", False) and method is not None:
            method.process_weights_after_loading(head)
