"""rackctl tensorrt_llm_bls model: preprocessing -> tensorrt_llm -> postprocessing in Python (BLS).

Streams one response per generated chunk when the model is decoupled and the request sets ``stream``.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
PRE_OUTPUTS = [
    "INPUT_ID",
    "REQUEST_INPUT_LEN",
    "REQUEST_OUTPUT_LEN",
    "OUT_END_ID",
    "OUT_PAD_ID",
    "BAD_WORDS_IDS",
    "STOP_WORDS_IDS",
]
#: (request input, preprocessing input) and (request input, tensorrt_llm input) pairs.
TO_PRE = [
    ("text_input", "QUERY"),
    ("max_tokens", "REQUEST_OUTPUT_LEN"),
    ("bad_words", "BAD_WORDS_DICT"),
    ("stop_words", "STOP_WORDS_DICT"),
    ("end_id", "END_ID"),
    ("pad_id", "PAD_ID"),
]
TO_LLM = [
    ("temperature", "temperature"),
    ("top_k", "runtime_top_k"),
    ("top_p", "runtime_top_p"),
    ("stream", "streaming"),
]
PRE_TO_LLM = [
    ("INPUT_ID", "input_ids"),
    ("REQUEST_INPUT_LEN", "input_lengths"),
    ("REQUEST_OUTPUT_LEN", "request_output_len"),
    ("OUT_END_ID", "end_id"),
    ("OUT_PAD_ID", "pad_id"),
    ("BAD_WORDS_IDS", "bad_words_list"),
    ("STOP_WORDS_IDS", "stop_words_list"),
]


def _renamed(request, pairs):
    tensors = []
    for src, dst in pairs:
        tensor = pb_utils.get_input_tensor_by_name(request, src)
        if tensor is not None:
            tensors.append(pb_utils.Tensor(dst, tensor.as_numpy()))
    return tensors


def _checked(response):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return response


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config["parameters"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.llm_name = params["tensorrt_llm_model_name"]["string_value"]
        self.accumulate = params["accumulate_tokens"]["string_value"].lower() == "true"

    def execute(self, requests):
        responses = []
        for request in requests:
            sender = request.get_response_sender() if self.decoupled else None
            try:
                result = self._generate(request, sender)
                if sender is None:
                    responses.append(result)
            except Exception as exc:  # surfaced to the client as the request's error
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                if sender is None:
                    responses.append(error)
                else:
                    sender.send(error, flags=FINAL)
        return None if self.decoupled else responses

    def _generate(self, request, sender):
        pre = pb_utils.InferenceRequest(
            model_name="preprocessing", requested_output_names=PRE_OUTPUTS, inputs=_renamed(request, TO_PRE)
        )
        pre_response = _checked(pre.exec())
        llm_inputs = [
            pb_utils.Tensor(dst, pb_utils.get_output_tensor_by_name(pre_response, src).as_numpy())
            for src, dst in PRE_TO_LLM
        ] + _renamed(request, TO_LLM)
        llm = pb_utils.InferenceRequest(
            model_name=self.llm_name,
            requested_output_names=["output_ids", "sequence_length"],
            inputs=llm_inputs,
        )
        stream = pb_utils.get_input_tensor_by_name(request, "stream")
        streaming = stream is not None and bool(np.ravel(stream.as_numpy())[0])
        if not streaming:
            llm_response = next(iter(llm.exec(decoupled=True))) if self.decoupled else llm.exec()
            response = pb_utils.InferenceResponse(output_tensors=[self._detokenize(_checked(llm_response))])
            if sender is not None:
                sender.send(response, flags=FINAL)
            return response
        if sender is None:
            raise pb_utils.TritonModelException("stream=true needs the decoupled tensorrt_llm_bls model")
        tokens = None
        for llm_response in llm.exec(decoupled=True):
            _checked(llm_response)
            if not llm_response.output_tensors():
                continue
            if self.accumulate:
                tokens = _join(tokens, llm_response)
                sender.send(pb_utils.InferenceResponse(output_tensors=[self._detokenize_ids(*tokens)]))
            else:
                sender.send(pb_utils.InferenceResponse(output_tensors=[self._detokenize(llm_response)]))
        sender.send(flags=FINAL)
        return None

    def _detokenize(self, llm_response):
        ids = pb_utils.get_output_tensor_by_name(llm_response, "output_ids").as_numpy()
        lengths = pb_utils.get_output_tensor_by_name(llm_response, "sequence_length").as_numpy()
        return self._detokenize_ids(ids, lengths)

    def _detokenize_ids(self, ids, lengths):
        post = pb_utils.InferenceRequest(
            model_name="postprocessing",
            requested_output_names=["OUTPUT"],
            inputs=[pb_utils.Tensor("TOKENS_BATCH", ids), pb_utils.Tensor("SEQUENCE_LENGTH", lengths)],
        )
        text = pb_utils.get_output_tensor_by_name(_checked(post.exec()), "OUTPUT").as_numpy()
        return pb_utils.Tensor("text_output", text)


def _join(previous, llm_response):
    ids = pb_utils.get_output_tensor_by_name(llm_response, "output_ids").as_numpy()
    lengths = pb_utils.get_output_tensor_by_name(llm_response, "sequence_length").as_numpy()
    if previous is None:
        return ids, lengths
    old_ids, old_lengths = previous
    return np.concatenate([old_ids[..., : int(old_lengths.max())], ids], axis=-1), old_lengths + lengths
