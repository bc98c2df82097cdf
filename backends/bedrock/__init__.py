"""Amazon Bedrock's Converse API as a backend (``backend: bedrock``), in one room:

    backend.py     the Backend: URL, signing, complete and stream, errors to core's
    translate.py   OpenAI chat request -> Converse request (pure)
    reply.py       Converse answer and stream events -> OpenAI answer and chunks (pure)
    stream.py      the event stream, decoded by botocore, as OpenAI chunks
    signing.py     botocore's credential chain (off the loop) and SigV4 signer
    errors.py      Bedrock's error names -> core/errors.py

It needs botocore (``pip install 'routegate[bedrock]'``); ``gateway/upstreams.py``
imports it only for a model whose ``backend`` is ``bedrock``.
"""

from backends.bedrock.backend import BedrockBackend

__all__ = ["BedrockBackend"]
