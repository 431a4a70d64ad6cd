"""The AWS partitions the stack deploys to, and what differs between them: region names and DNS suffixes.

The stack is environment-agnostic (no account or region at synth), so whatever depends on the partition is
resolved by CloudFormation from ``AWS::Partition`` through a mapping built here, and whatever a name's length
depends on (the longest region name) is computed from the partition data botocore ships
(``botocore/data/partitions.json``: each partition's ``regionRegex``, regions and ``dnsSuffix``) rather than
guessed.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

# The partitions the stack is built and tested for. ``aws-us-gov`` uses the commercial DNS suffix and endpoint
# service names; ``aws-cn`` has its own suffix (amazonaws.com.cn) and names the ECR interface endpoints
# ``cn.com.amazonaws.<region>.ecr.*`` (aws-cdk-lib's InterfaceVpcEndpointAwsService table, 2.275.0; the China
# regions' VPC endpoint documentation). Deploying to another partition fails at the mapping lookup, by name.
SUPPORTED_PARTITIONS = ("aws", "aws-cn", "aws-us-gov")
ECR_ENDPOINT_PREFIX = {"aws": "com.amazonaws", "aws-us-gov": "com.amazonaws", "aws-cn": "cn.com.amazonaws"}
# CloudFormation's pseudo parameter AWS::AccountId is always 12 digits.
ACCOUNT_ID_SAMPLE = "123456789012"


@dataclass(frozen=True)
class Partition:
    name: str
    dns_suffix: str
    regions: tuple[str, ...]

    @property
    def longest_region(self) -> str:
        return max(self.regions, key=lambda r: (len(r), r))


@functools.cache
def partitions() -> dict[str, Partition]:
    """Every partition botocore knows, with its real regions (its ``-global`` pseudo-regions left out)."""
    import botocore

    data = json.loads((Path(botocore.__file__).parent / "data" / "partitions.json").read_text())
    out = {}
    for entry in data["partitions"]:
        pattern = re.compile(entry["regionRegex"])
        regions = tuple(sorted(r for r in entry["regions"] if pattern.match(r)))
        out[entry["id"]] = Partition(entry["id"], entry["outputs"]["dnsSuffix"], regions)
    return out


def supported() -> list[Partition]:
    known = partitions()
    missing = [p for p in SUPPORTED_PARTITIONS if p not in known]
    if missing:
        raise RuntimeError(f"botocore's partitions.json lacks {missing}; upgrade botocore")
    return [known[p] for p in SUPPORTED_PARTITIONS]


def dns_mapping() -> dict[str, dict[str, str]]:
    """The CloudFormation mapping partition -> {DnsSuffix, EcrEndpointPrefix} the network construct reads."""
    return {p.name: {"DnsSuffix": p.dns_suffix, "EcrEndpointPrefix": ECR_ENDPOINT_PREFIX[p.name]} for p in supported()}
