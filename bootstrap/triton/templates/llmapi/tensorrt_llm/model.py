"""rackctl LLM-API model: ``tensorrt_llm.LLM`` (arguments from ``model.yaml``) in Triton's Python backend.

Needs the TensorRT-LLM container (GPU); ``rackctl triton load-check`` replaces it by the CPU stand-in.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _value(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = np.ravel(tensor.as_numpy())[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _words(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    words = [w.decode("utf-8") if isinstance(w, bytes) else str(w) for w in np.ravel(tensor.as_numpy())]
    return [w for w in words if w] or None


def _text(text):
    return pb_utils.Tensor("text_output", np.array([[text]], dtype=object))


class TritonPythonModel:
    def initialize(self, args):
        from tensorrt_llm import LLM  # noqa: PLC0415 - only in the TensorRT-LLM container

        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.yaml")) as handle:
            settings = yaml.safe_load(handle)
        self.triton = settings["triton_config"]
        self.llm = LLM(**settings["llm_args"])

    def _sampling(self, request):
        from tensorrt_llm import SamplingParams  # noqa: PLC0415 - only in the TensorRT-LLM container

        return SamplingParams(
            max_tokens=int(_value(request, "max_tokens", self.triton["max_output_len"])),
            temperature=float(_value(request, "temperature", 1.0)),
            top_k=int(_value(request, "top_k", 0)) or None,
            top_p=float(_value(request, "top_p", 1.0)),
            stop=_words(request, "stop_words"),
            bad=_words(request, "bad_words"),
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = str(_value(request, "text_input", ""))
            stream = bool(_value(request, "stream", False))
            sender = request.get_response_sender() if self.decoupled else None
            try:
                if stream and not self.decoupled:
                    raise pb_utils.TritonModelException("stream=true needs the decoupled model")
                if stream:
                    for output in self.llm.generate_async(prompt, self._sampling(request), streaming=True):
                        sender.send(pb_utils.InferenceResponse(output_tensors=[_text(output.outputs[0].text_diff)]))
                    sender.send(flags=FINAL)
                    continue
                output = self.llm.generate(prompt, self._sampling(request))
                response = pb_utils.InferenceResponse(output_tensors=[_text(output.outputs[0].text)])
            except Exception as exc:  # surfaced to the client as the request's error
                response = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
            if sender is not None:
                sender.send(response, flags=FINAL)
            else:
                responses.append(response)
        return None if self.decoupled else responses

    def finalize(self):
        self.llm.shutdown()
