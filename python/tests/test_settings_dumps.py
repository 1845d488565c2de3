"""Every dump starts with the settings that differ from their defaults, as the command line's do."""
import numpy as np

import alloy


def test_dumps_say_which_settings_differ_from_their_defaults():
    with alloy.FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 8], dtype=alloy.float32)
        fd.add_output(fd.ops.exp(x))
    a = np.ones((2, 8), np.float32)
    assert "# settings" not in fd.dump("segments", [a])
    alloy.set_setting("NO_SIDE_STREAM", 1)
    try:
        for stage in ("segments", "program", "cuda"):
            assert fd.dump(stage, [a]).startswith("# settings: ALLOY_NO_SIDE_STREAM=1\n"), stage
    finally:
        alloy.set_setting("NO_SIDE_STREAM", 0)
    assert "# settings" not in fd.dump("program", [a])
