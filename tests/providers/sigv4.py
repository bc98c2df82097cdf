"""The Bedrock test server's check of a request's SigV4 signature, as AWS makes it.

    problem = signature_problem(request_parts, keys={"AKIDTEST": ("secret", None)},
                                region="us-east-1")      # None, or (error name, message)

The signature is recomputed with botocore's ``SigV4Auth`` from the test's known
credentials, over the request exactly as it arrived: the raw path (its
percent-encoding untouched), the query, the headers the ``Authorization``
header says were signed, and the body. A missing, foreign-scoped, stale or
wrong signature is refused with the error AWS names for it.
"""

from __future__ import annotations

import datetime
import hmac
from dataclasses import dataclass

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

MAX_SKEW = datetime.timedelta(minutes=5)
MISMATCH = ("The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.")


@dataclass(frozen=True)
class Received:
    method: str
    raw_path: str
    query: str
    headers: dict[str, str]      # lower-case names
    body: bytes


def _fields(authorization: str) -> dict[str, str] | None:
    scheme, _, rest = authorization.partition(" ")
    if scheme != "AWS4-HMAC-SHA256":
        return None
    fields = {}
    for part in rest.split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    return fields if {"Credential", "SignedHeaders", "Signature"} <= fields.keys() else None


def signature_problem(req: Received, keys: dict[str, tuple[str, str | None]], region: str,
                      service: str = "bedrock") -> tuple[str, str] | None:
    authorization = req.headers.get("authorization")
    if not authorization:
        return "MissingAuthenticationTokenException", "Missing Authentication Token"
    fields = _fields(authorization)
    if fields is None:
        return "IncompleteSignatureException", "Authorization header requires AWS4-HMAC-SHA256."
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[0] not in keys:
        return "UnrecognizedClientException", "The security token included in the request is invalid."
    akid, day, scope_region, scope_service, terminal = scope
    if scope_service != service or scope_region != region or terminal != "aws4_request":
        return ("InvalidSignatureException", f"Credential should be scoped to a valid region "
                f"and to the service '{service}'.")
    secret, token = keys[akid]
    if token is not None and req.headers.get("x-amz-security-token") != token:
        return "UnrecognizedClientException", "The security token included in the request is invalid."
    stamp = req.headers.get("x-amz-date", "")
    try:
        when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return "IncompleteSignatureException", "Missing or invalid X-Amz-Date."
    if stamp[:8] != day or abs(datetime.datetime.now(datetime.UTC) - when) > MAX_SKEW:
        return "InvalidSignatureException", f"Signature expired: {stamp} is out of range."
    signed = fields["SignedHeaders"].split(";")
    if not {"host", "x-amz-date"} <= set(signed) or any(h not in req.headers for h in signed):
        return "InvalidSignatureException", MISMATCH
    url = f"http://{req.headers['host']}{req.raw_path}" + (f"?{req.query}" if req.query else "")
    request = AWSRequest(method=req.method, url=url, data=req.body,
                         headers={h: req.headers[h] for h in signed})
    request.context["timestamp"] = stamp
    auth = SigV4Auth(Credentials(akid, secret, token), service, region)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)),
                              request)
    if not hmac.compare_digest(expected, fields["Signature"]):
        return "InvalidSignatureException", MISMATCH
    return None
