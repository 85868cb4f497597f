"""The one rule that turns ONNX tensor names into .dl names."""

from dlc.compiler.importers.names import Names, escape


def test_valid_names_are_kept():
    assert escape("conv1_w") == "conv1_w"
    assert escape("_x9") == "_x9"


def test_invalid_characters_become_underscores_and_bad_starts_get_a_prefix():
    assert escape("gpu_0/conv1.w:0") == "gpu_0_conv1_w_0"
    assert escape("0") == "t_0"
    assert escape("") == "t_"
    assert escape("input") == "t_input"
    assert escape("loss") == "t_loss"


def test_clashes_get_a_numbered_suffix():
    names = Names()
    assert [names.new(n) for n in ("a/b", "a.b", "a_b", "a_b_2")] == ["a_b", "a_b_2", "a_b_3", "a_b_2_2"]


def test_words_that_start_a_statement_get_a_prefix_and_the_result_parses():
    import dlc

    for word in ("frozen", "def", "for", "return"):
        assert escape(word) == f"t_{word}"
        dlc.compile(f"input x: [B]\n{escape(word)} = x + 1\n")


def test_params_keep_their_state_dict_names():
    assert escape("h.0.attn.c_attn.weight", dotted=True) == "h.0.attn.c_attn.weight"
    assert escape("h.0.attn.c_attn.weight") == "h_0_attn_c_attn_weight"  # other tensors: no dots
    assert escape("input.weight", dotted=True) == "input_weight"  # a keyword first: no dots
    assert escape("a..b", dotted=True) == "a__b"
    assert escape("0.weight", dotted=True) == "t_0.weight"  # nn.Sequential's keys


def test_weights_keep_the_onnx_name_where_reading_it_back_finds_the_param():
    from dlc.compiler.importers.names import saved_key
    from dlc.runtime.saved_names import by_param_name

    assert saved_key("0.weight", "t_0.weight") == "0.weight"
    assert saved_key("onnx::MatMul_12", "onnx__MatMul_12") == "onnx::MatMul_12"
    assert saved_key("a/b", "a_b_2") == "a_b_2"  # de-duplicated: the .dl name, which reads back as itself
    params = {"t_0.weight": (2,), "onnx__MatMul_12": (3,), "a_b_2": (1,)}
    got = by_param_name({"0.weight": 1, "onnx::MatMul_12": 2, "a_b_2": 3, "other": 4}, params)
    assert got == {"t_0.weight": 1, "onnx__MatMul_12": 2, "a_b_2": 3, "other": 4}  # `other`: refused by the caller
