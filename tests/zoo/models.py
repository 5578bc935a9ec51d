"""The architectures of the zoo: small ``transformers`` configs (no
download), each with its task, its token embedding (where the NaN fault goes
for token inputs) and a layer followed by a ReLU (where the dead fault goes).

ReLU is chosen wherever the config lets it be (``hidden_act="relu"`` and the
like): a layer zeroed in front of a GELU or SiLU is not dead (their slope at
0 is not 0), so it would train back. Names are ``model.named_modules()``
names, checked against the built model by tests/test_model_zoo.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import transformers as tf

from . import data

__all__ = ["Arch", "ARCHS", "by_name"]

TOKENS = data.VOCAB + 1  # the vocabulary with MASK
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


@dataclass(frozen=True)
class Arch:
    """One architecture of the zoo."""

    name: str
    build: Callable[[], object]  #: -> the model (a torch.nn.Module)
    #: "clm" next token, "mlm" masked tokens, "seq2seq" denoising, "image",
    #: "wave" (raw audio) or "mel" (spectrogram) classification
    task: str
    #: the module zeroed (weight and bias) for the dead fault, then every
    #: name a root cause may honestly give for it (the zeroed module, the
    #: ReLU module after it)
    dead: tuple
    #: token models: the embedding made NaN (the module the forward calls),
    #: then every name a root cause may honestly give for it (a seq2seq
    #: model's encoder and decoder embeddings are modules of their own that
    #: share ``shared``'s weight); None for float inputs
    embedding: tuple | None = None


def _bert():
    return tf.BertForMaskedLM(tf.BertConfig(vocab_size=TOKENS, max_position_embeddings=32, hidden_act="relu",
                                            **SMALL))


def _roberta():
    return tf.RobertaForMaskedLM(tf.RobertaConfig(vocab_size=TOKENS, max_position_embeddings=40, pad_token_id=1,
                                                  hidden_act="relu", **SMALL))


def _distilbert():
    return tf.DistilBertForMaskedLM(tf.DistilBertConfig(vocab_size=TOKENS, max_position_embeddings=32, dim=32,
                                                        n_layers=2, n_heads=2, hidden_dim=64, activation="relu"))


def _albert():
    return tf.AlbertForMaskedLM(tf.AlbertConfig(vocab_size=TOKENS, max_position_embeddings=32, embedding_size=16,
                                                hidden_act="relu", **SMALL))


def _electra():
    return tf.ElectraForMaskedLM(tf.ElectraConfig(vocab_size=TOKENS, max_position_embeddings=32, embedding_size=16,
                                                  hidden_act="relu", **SMALL))


def _gpt2():
    return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=TOKENS, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                            n_inner=64, activation_function="relu",
                                            bos_token_id=0, eos_token_id=0))


def _llama():
    return tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=TOKENS, max_position_embeddings=32, hidden_act="relu",
                                              num_key_value_heads=2, **SMALL))


def _mistral():
    return tf.MistralForCausalLM(tf.MistralConfig(vocab_size=TOKENS, max_position_embeddings=32, hidden_act="relu",
                                                  num_key_value_heads=1, sliding_window=None, **SMALL))


def _phi():
    return tf.PhiForCausalLM(tf.PhiConfig(vocab_size=TOKENS, max_position_embeddings=32, hidden_act="relu", **SMALL))


def _gpt_neox():
    return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(vocab_size=TOKENS, max_position_embeddings=32, hidden_act="relu",
                                                  **SMALL))


def _opt():
    return tf.OPTForCausalLM(tf.OPTConfig(vocab_size=TOKENS, max_position_embeddings=32, hidden_size=32,
                                          word_embed_proj_dim=32, num_hidden_layers=2, num_attention_heads=2,
                                          ffn_dim=64, activation_function="relu", pad_token_id=TOKENS - 1))


def _rwkv():
    return tf.RwkvForCausalLM(tf.RwkvConfig(vocab_size=TOKENS, context_length=32, hidden_size=32, num_hidden_layers=2,
                                            attention_hidden_size=32, intermediate_size=64))


def _t5():
    return tf.T5ForConditionalGeneration(tf.T5Config(vocab_size=TOKENS, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                                     num_heads=2, feed_forward_proj="relu",
                                                     decoder_start_token_id=data.MASK, pad_token_id=0))


def _bart():
    return tf.BartForConditionalGeneration(tf.BartConfig(
        vocab_size=TOKENS, max_position_embeddings=32, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        activation_function="relu", pad_token_id=TOKENS - 1, decoder_start_token_id=data.MASK))


def _vit():
    return tf.ViTForImageClassification(tf.ViTConfig(image_size=data.IMAGE, patch_size=4, num_labels=data.CLASSES,
                                                     hidden_act="relu", **SMALL))


def _swin():
    return tf.SwinForImageClassification(tf.SwinConfig(image_size=data.IMAGE, patch_size=2, window_size=4,
                                                       embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                                       hidden_act="relu", num_labels=data.CLASSES))


def _convnext():
    return tf.ConvNextForImageClassification(tf.ConvNextConfig(
        patch_size=2, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, hidden_act="relu", num_labels=data.CLASSES))


def _resnet():
    return tf.ResNetForImageClassification(tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                                           layer_type="basic", hidden_act="relu",
                                                           num_labels=data.CLASSES))


def _wav2vec2():
    return tf.Wav2Vec2ForSequenceClassification(tf.Wav2Vec2Config(
        vocab_size=8, conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2), num_feat_extract_layers=2,
        num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2, feat_extract_activation="relu",
        mask_time_prob=0.0, layerdrop=0.0, classifier_proj_size=16, num_labels=data.CLASSES, hidden_act="relu",
        **SMALL))


def _whisper():
    return tf.WhisperForAudioClassification(tf.WhisperConfig(
        vocab_size=TOKENS, num_mel_bins=data.MELS, max_source_positions=data.FRAMES // 2, max_target_positions=16,
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="relu", classifier_proj_size=16,
        num_labels=data.CLASSES))


ARCHS = [
    Arch("bert", _bert, "mlm", ("bert.encoder.layer.0.intermediate.dense",
                                "bert.encoder.layer.0.intermediate.intermediate_act_fn"),
         ("bert.embeddings.word_embeddings",)),
    Arch("roberta", _roberta, "mlm", ("roberta.encoder.layer.0.intermediate.dense",
                                      "roberta.encoder.layer.0.intermediate.intermediate_act_fn"),
         ("roberta.embeddings.word_embeddings",)),
    Arch("distilbert", _distilbert, "mlm", ("distilbert.transformer.layer.0.ffn.lin1",
                                            "distilbert.transformer.layer.0.ffn.activation"),
         ("distilbert.embeddings.word_embeddings",)),
    Arch("albert", _albert, "mlm", ("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn",
                                    "albert.encoder.albert_layer_groups.0.albert_layers.0.activation"),
         ("albert.embeddings.word_embeddings",)),
    Arch("electra", _electra, "mlm", ("electra.encoder.layer.0.intermediate.dense",
                                      "electra.encoder.layer.0.intermediate.intermediate_act_fn"),
         ("electra.embeddings.word_embeddings",)),
    Arch("gpt2", _gpt2, "clm", ("transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.act"), ("transformer.wte",)),
    Arch("llama", _llama, "clm", ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.act_fn"),
         ("model.embed_tokens",)),
    Arch("mistral", _mistral, "clm", ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.act_fn"),
         ("model.embed_tokens",)),
    Arch("phi", _phi, "clm", ("model.layers.0.mlp.fc1", "model.layers.0.mlp.activation_fn"),
         ("model.embed_tokens",)),
    Arch("gpt_neox", _gpt_neox, "clm", ("gpt_neox.layers.0.mlp.dense_h_to_4h", "gpt_neox.layers.0.mlp.act"),
         ("gpt_neox.embed_in",)),
    Arch("opt", _opt, "clm", ("model.decoder.layers.0.fc1", "model.decoder.layers.0.activation_fn"),
         ("model.decoder.embed_tokens",)),
    # RWKV's channel mixing squares a functional relu of its key projection
    Arch("rwkv", _rwkv, "clm", ("rwkv.blocks.0.feed_forward.key",), ("rwkv.embeddings",)),
    Arch("t5", _t5, "seq2seq", ("encoder.block.0.layer.1.DenseReluDense.wi",
                                "encoder.block.0.layer.1.DenseReluDense.act"),
         ("encoder.embed_tokens", "shared", "decoder.embed_tokens")),
    Arch("bart", _bart, "seq2seq", ("model.encoder.layers.0.fc1", "model.encoder.layers.0.activation_fn"),
         ("model.encoder.embed_tokens", "model.shared", "model.decoder.embed_tokens")),
    Arch("vit", _vit, "image", ("vit.layers.0.mlp.fc1", "vit.layers.0.mlp.activation_fn")),
    Arch("swin", _swin, "image", ("swin.encoder.layers.0.blocks.0.mlp.fc1",
                                  "swin.encoder.layers.0.blocks.0.mlp.activation_fn")),
    Arch("convnext", _convnext, "image", ("convnext.encoder.stages.0.layers.0.pwconv1",
                                          "convnext.encoder.stages.0.layers.0.act")),
    # the BatchNorm before the ReLU: a zeroed conv would leave its shift alive
    Arch("resnet", _resnet, "image", ("resnet.encoder.stages.0.layers.0.layer.0.normalization",
                                      "resnet.encoder.stages.0.layers.0.layer.0.activation")),
    Arch("wav2vec2", _wav2vec2, "wave", ("wav2vec2.encoder.layers.0.feed_forward.intermediate_dense",
                                         "wav2vec2.encoder.layers.0.feed_forward.intermediate_act_fn")),
    Arch("whisper", _whisper, "mel", ("encoder.layers.0.fc1", "encoder.layers.0.activation_fn")),
]


def by_name(name: str) -> Arch:
    """The architecture called ``name``."""
    for arch in ARCHS:
        if arch.name == name:
            return arch
    raise KeyError(name)
