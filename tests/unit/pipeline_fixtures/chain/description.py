"""The chain pipeline's description (named ``toy``, for the generator's test workspace):
prepare -> first -> relu -> second (its ``scores`` renamed ``doubled``) -> finish, which calls
``scale``; ``[probe]`` declares the health probe's request."""

CHAIN_PACKAGE = "tests.unit.pipeline_fixtures.chain"
CHAIN_TOML = f"""\
name = "toy"
max_batch_size = 8

[[input]]
name = "X"
dtype = "FP32"
dims = [4]

[[output]]
name = "OUT"
dtype = "FP32"
dims = [2]

[models.first]
build = "{CHAIN_PACKAGE}.models:first"

[models.second]
build = "{CHAIN_PACKAGE}.models:second"

[models.scale]
build = "{CHAIN_PACKAGE}.models:scale"

[[step]]
function = "{CHAIN_PACKAGE}.steps:prepare"
inputs = ["X"]
outputs = [{{ name = "features", dtype = "FP32", dims = [4] }}]

[[step]]
core = "first"

[[step]]
function = "{CHAIN_PACKAGE}.steps:relu"
inputs = ["scores"]
outputs = [{{ name = "x", dtype = "FP32", dims = [2] }}]

[[step]]
core = "second"
outputs = {{ scores = "doubled" }}

[[step]]
function = "{CHAIN_PACKAGE}.steps:finish"
inputs = ["doubled"]
calls = ["scale"]
outputs = [{{ name = "OUT", dtype = "FP32", dims = [2] }}]

[samples]
function = "{CHAIN_PACKAGE}.steps:samples"

[probe]
inputs = [{{ name = "X", datatype = "FP32", shape = [1, 4], data = [1.0, 1.0, 1.0, 1.0] }}]
"""
