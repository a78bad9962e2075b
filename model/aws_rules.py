"""What AWS accepts, as pure checks: each returns None or the reason a value is refused.

The one home of AWS naming rules (ids, zone names, ARNs, registry hosts, SSM and
Secrets Manager names); the section modules (`model/network.py` ...) turn the reasons
into `path: message` lines with the key and the fix.
Every rule here is one AWS refuses only after other resources exist (FSx and the
network take tens of minutes) or silently at every instance launch, so the stack file
is refused before anything is created. No pulumi or boto3 import.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

# Region codes per partition, as botocore's endpoint data lists them [BOTO-ENDPOINTS]
# (the same codes as the Regions table of [AWS-REGIONS]). A region AWS opens later is
# refused until it is added here: the message says so, and the fix is one line.
KNOWN_REGIONS: dict[str, tuple[str, ...]] = {
    "aws": (
        "af-south-1",
        "ap-east-1",
        "ap-east-2",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-6",
        "ap-southeast-7",
        "ca-central-1",
        "ca-west-1",
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "il-central-1",
        "me-central-1",
        "me-south-1",
        "mx-central-1",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
    ),
    "aws-cn": ("cn-north-1", "cn-northwest-1"),
    "aws-us-gov": ("us-gov-east-1", "us-gov-west-1"),
}
REGIONS = frozenset(r for regions in KNOWN_REGIONS.values() for r in regions)

# An AZ name is its region's code and one letter [AWS-REGIONS] (Local and Wavelength
# Zones have longer names; EFA peers and Capacity Blocks live in AZs).
AZ_NAME = re.compile(r"^(?P<region>[a-z]{2}(?:-[a-z]+)+-\d)(?P<letter>[a-z])$")


def is_resource_id(prefix: str, value: str) -> bool:
    """An EC2 resource id: `<prefix>-<8 to 17 hex digits>` (subnet-, ami-, cr-)."""
    return re.match(rf"^{prefix}-[0-9a-f]{{8,17}}$", value) is not None


def region_problem(region: str) -> str | None:
    if region in REGIONS:
        return None
    close = sorted(r for r in REGIONS if r.split("-")[0] == region.split("-")[0])
    hint = f" (known in that area: {', '.join(close)})" if close else ""
    return (
        f"'{region}' is not an AWS region code{hint}; use a code such as us-east-2 "
        "(`aws ec2 describe-regions` lists your account's regions)"
    )


def partition_of(region: str) -> str | None:
    """The ARN partition of a known region code (aws, aws-cn, aws-us-gov), else None."""
    return next((part for part, regions in KNOWN_REGIONS.items() if region in regions), None)


def az_region(az: str) -> str | None:
    """The region an AZ name belongs to, or None when it is not `<region><letter>`."""
    m = AZ_NAME.match(az)
    return m.group("region") if m else None


# gp3: at most 0.25 MiB/s of throughput per provisioned IOPS [EBS-GP3].
GP3_MIBPS_PER_IOPS = 0.25


def gp3_min_iops(throughput_mibps: int) -> int:
    return int(throughput_mibps / GP3_MIBPS_PER_IOPS + 0.999999)


# Tags [AWS-TAGS]: at most 50 per resource (keys with the reserved `aws:` prefix do not
# count), keys 1-128 and values 0-256 characters of letters, digits, spaces and
# `_ . : / = + - @`. Instance tags in instance metadata are stricter [EC2-IMDS-TAGS]: keys
# only ASCII letters, digits and `+ - = . , _ : @` (no space, no `/`), and not `.`, `..`
# or `_index`; EC2 refuses to launch an instance whose tag keys break that, and every
# tag in `tags` reaches the instances (launch template and Auto Scaling group).
MAX_TAGS_PER_RESOURCE = 50
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256
_IMDS_KEY = re.compile(r"^[A-Za-z0-9+\-=.,_:@]+$")
_IMDS_FORBIDDEN_KEYS = (".", "..", "_index")
_TAG_PUNCT = set("_.:/=+-@")


def _tag_char_ok(c: str) -> bool:
    # \p{L}, \p{Z}, \p{N} of AWS's tag pattern [AWS-TAGS]
    return c in _TAG_PUNCT or unicodedata.category(c)[0] in "LZN"


def tag_key_problem(key: str) -> str | None:
    if key.lower().startswith("aws:"):
        return f"tag key '{key}' uses the reserved 'aws:' prefix; rename it"
    if len(key) > MAX_TAG_KEY:
        return f"tag key '{key[:20]}...' is {len(key)} characters; AWS allows at most {MAX_TAG_KEY}: shorten it"
    if key in _IMDS_FORBIDDEN_KEYS:
        return (
            f"tag key '{key}' is not allowed: nodes read their tags from instance metadata, where "
            "EC2 refuses a key that is only '.', '..' or '_index' and then launches no node; rename it"
        )
    if not _IMDS_KEY.match(key):
        bad = sorted({c for c in key if not _IMDS_KEY.match(c)})
        shown = ", ".join(repr(c) for c in bad)
        fix = re.sub(r"[^A-Za-z0-9+\-=.,_:@]+", "-", key).strip("-") or "team"
        return (
            f"tag key '{key}' has {shown}: nodes read their tags from instance metadata, where EC2 "
            "accepts only ASCII letters, digits and + - = . , _ : @ in keys (no spaces, no '/') and "
            f"otherwise launches no node; rename it, e.g. '{fix}'"
        )
    if "," in key:
        return (
            f"tag key '{key}' has ',', which instance metadata allows but IAM, S3 and FSx tags "
            "refuse; rename it without ','"
        )
    return None


def tag_value_problem(key: str, value: str) -> str | None:
    if len(value) > MAX_TAG_VALUE:
        return f"tag '{key}' value is {len(value)} characters; AWS allows at most {MAX_TAG_VALUE}: shorten it"
    if value.lower().startswith("aws:"):
        return f"tag '{key}' value '{value}' starts with the reserved 'aws:' prefix; change it"
    bad = sorted({c for c in value if not _tag_char_ok(c)})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return (
            f"tag '{key}' value '{value}' has {shown}; AWS tag values take letters, digits, spaces "
            "and _ . : / = + - @ only (IAM, S3 and FSx refuse others): replace them"
        )
    return None


# S3 general purpose bucket names [S3-NAMES].
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def s3_bucket_problem(name: str) -> str | None:
    if not 3 <= len(name) <= 63:
        return f"bucket name '{name}' is {len(name)} characters; S3 bucket names are 3 to 63"
    if not _BUCKET.match(name):
        return (
            f"bucket name '{name}' is not one S3 accepts: lowercase letters, digits, '.' and '-' "
            "only, starting and ending with a letter or digit"
        )
    if ".." in name:
        return f"bucket name '{name}' has two adjacent periods, which S3 refuses"
    if _IPV4.match(name):
        return f"bucket name '{name}' is shaped like an IP address, which S3 refuses"
    for p in _BUCKET_PREFIXES:
        if name.startswith(p):
            return f"bucket name '{name}' starts with '{p}', a prefix S3 reserves"
    for s in _BUCKET_SUFFIXES:
        if name.endswith(s):
            return f"bucket name '{name}' ends with '{s}', a suffix S3 reserves"
    return None


# VPC IPv4 CIDR: /16 to /28 [VPC-CIDR].
VPC_MIN_PREFIX, VPC_MAX_PREFIX = 16, 28


def cidr_problem(cidr: str, max_prefix: int) -> str | None:
    """`cidr` as a VPC block the program can split into four subnets (`max_prefix`)."""
    m = re.match(r"^(\d{1,3}(?:\.\d{1,3}){3})/(\d{1,2})$", cidr)
    if not m or any(int(o) > 255 for o in m.group(1).split(".")):
        return f"'{cidr}' is not an IPv4 CIDR block; use e.g. '10.0.0.0/16'"
    prefix = int(m.group(2))
    if not VPC_MIN_PREFIX <= prefix <= max_prefix:
        return (
            f"'{cidr}' is a /{prefix}; AWS accepts VPC blocks from /{VPC_MIN_PREFIX} to "
            f"/{VPC_MAX_PREFIX}, and the program splits the block into four subnets of at least "
            f"/{max_prefix + 2}, so use /{VPC_MIN_PREFIX} to /{max_prefix}, e.g. '10.0.0.0/16'"
        )
    net = ipaddress.ip_network(cidr, strict=False)
    if str(net) != cidr:
        return f"'{cidr}' has host bits set, which EC2 refuses for a VPC block; use the network address '{net}'"
    return None


def is_private(cidr: str) -> bool:
    """RFC 1918 (or the 100.64/10 shared range, which VPCs also accept)."""
    net = ipaddress.IPv4Network(cidr, strict=False)
    ranges = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
    return any(net.subnet_of(ipaddress.IPv4Network(r)) for r in ranges)


# Enroot image references: `[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]` [ENROOT-IMPORT];
# the repository part follows the OCI distribution grammar (lowercase path components).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_ENROOT_REF = re.compile(
    r"^(?:docker://)?"
    r"(?:(?P<user>[^@#/:\s]+)@)?"
    r"(?:(?P<registry>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d+)?)#)?"
    rf"(?P<image>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})|@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}))?$"
)
_SQSH = re.compile(r"^/[A-Za-z0-9._/+-]+\.sqsh$")


def docker_style_fix(ref: str) -> str | None:
    """`nvcr.io#nvidia/pytorch:tag` for a Docker-style `nvcr.io/nvidia/pytorch:tag`, else None.

    Docker reads a first path component with a dot or a colon, or `localhost`, as the
    registry host; Enroot only reads what stands before a `#` as the registry and sends
    anything else to Docker Hub [ENROOT-IMPORT].
    """
    body = ref.removeprefix("docker://")
    if "#" in body or "/" not in body:
        return None
    first, rest = body.split("/", 1)
    user = ""
    if "@" in first:
        user, first = first.rsplit("@", 1)
        user += "@"
    if "." in first or ":" in first or first == "localhost":
        return f"{user}{first}#{rest}"
    return None


def container_image_problem(ref: str) -> str | None:
    if ref == "":
        return None  # '' skips the in-container step
    if ref.startswith("/"):
        dots = dot_segment_problem(ref)
        if dots:
            return dots
        if _SQSH.match(ref):
            return None
        return (
            f"'{ref}' is not a squash file path; use an absolute path ending in .sqsh, e.g. '/fsx/images/pytorch.sqsh'"
        )
    fix = docker_style_fix(ref)
    if fix is not None and _ENROOT_REF.match(fix):
        return (
            f"'{ref}' is a Docker-style reference: Enroot only takes the registry from before a '#' "
            f"and would look for this image on Docker Hub instead (the pull fails, or gets another "
            f"image); write '{fix}'"
        )
    if not _ENROOT_REF.match(ref):
        return (
            f"'{ref}' is not an Enroot image reference [USER@][REGISTRY#]IMAGE[:TAG|@DIGEST] "
            "(repository in lowercase, no spaces) nor an absolute path to a .sqsh file; use e.g. "
            "'nvcr.io#nvidia/pytorch:26.08-py3', or '' to skip the in-container check"
        )
    return None


# S3 URI of a data repository: s3://bucket[/prefix].
S3_URI = re.compile(r"^s3://([^/\s]*)(/\S*)?$")

# An ECR private registry host: <account>.dkr.ecr.<region>.amazonaws.com[.cn] [ECR-AUTH].
ECR_HOST = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
ACCOUNT_ID = re.compile(r"^\d{12}$")
# A registry host as Enroot matches it in its credentials file (`machine <host>`), with
# an optional port; lowercase, because registry hosts are DNS names.
REGISTRY_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:\d{1,5})?$")
# SSM parameter names: letters, digits and . - _ with / for hierarchies of at most 15
# levels, at most 1011 characters, no 'aws' or 'ssm' prefix [SSM-NAMES].
SSM_NAME = re.compile(r"^/?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
SSM_RESERVED_PREFIX = re.compile(r"^/?(aws|ssm)", re.IGNORECASE)


def is_ssm_parameter_name(name: str) -> bool:
    return bool(SSM_NAME.match(name)) and len(name) <= 1011 and name.count("/") <= 15


# Secrets Manager: a name (letters, digits and /_+=.@-) or the secret's full ARN [SM-ARN].
SM_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")
SM_ARN = re.compile(r"^arn:aws(-cn|-us-gov)?:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+$")

# arn:PARTITION:iam::(aws|ACCOUNT):policy/[PATH/]NAME; names and paths use letters,
# digits and +=,.@_- [IAM-QUOTAS]. The partitions IAM exists in: aws, aws-cn, aws-us-gov.
POLICY_ARN = re.compile(r"^arn:(aws|aws-cn|aws-us-gov):iam::(aws|\d{12}):policy/(?:[\w+=,.@-]+/)*[\w+=,.@-]{1,128}$")
# service:Action, with * and ? wildcards in the action part [IAM-JSON].
IAM_ACTION = re.compile(r"^[a-z0-9][a-z0-9-]*:[A-Za-z0-9*?]+$")
IAM_SID = re.compile(r"^[A-Za-z0-9]*$")  # IAM policies: ASCII letters and digits only [IAM-JSON]


# arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE [IAM-ARN]; region and account may be empty
# (S3, IAM) or wildcards in a policy's Resource [IAM-JSON].
ARN = re.compile(r"^arn:(?P<partition>[^:]*):(?P<service>[^:]*):(?P<region>[^:]*):(?P<account>[^:]*):(?P<resource>.+)$")
_ARN_SERVICE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ARN_ACCOUNT = re.compile(r"^(?:\d{12}|aws|[0-9?]{0,11}\*[0-9*?]{0,11}|[0-9*]{0,11}\?[0-9*?]{0,11})?$")
_ARN_SHAPE = "arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE, e.g. 'arn:aws:s3:::my-bucket/*'"


def arn_problem(arn: str) -> str | None:
    """Why IAM would refuse (or never match) `arn`, or None."""
    m = ARN.match(arn)
    if m is None:
        return f"'{arn}' is not an ARN; write {_ARN_SHAPE}"
    if m["partition"] not in KNOWN_REGIONS:
        return f"'{arn}' names partition '{m['partition']}'; the partitions are aws, aws-cn and aws-us-gov"
    if not _ARN_SERVICE.match(m["service"]):
        return f"'{arn}' has no service name (e.g. s3, ec2) after the partition; write {_ARN_SHAPE}"
    region = m["region"]
    if region and not any(c in region for c in "*?") and region not in REGIONS:
        return f"'{arn}' names region '{region}', which is not an AWS region code; use a code such as us-east-2"
    if not _ARN_ACCOUNT.match(m["account"]):
        return f"'{arn}' names account '{m['account']}'; an account is 12 digits (or empty, as S3 ARNs have)"
    return None


def arn_partition_problem(arn: str, region: str) -> str | None:
    """An ARN of another partition than the stack's region: IAM refuses to attach such a
    policy, and a statement naming it never matches anything [IAM-ARN]."""
    m = ARN.match(arn)
    want = partition_of(region)
    if m is None or want is None or m["partition"] == want or m["partition"] not in KNOWN_REGIONS:
        return None
    return f"'{arn}' is in partition {m['partition']}, but aws:region {region} is in {want}; write arn:{want}:..."


# Condition operators IAM has, with their ForAllValues:/ForAnyValue: and ...IfExists forms
# (Null takes no IfExists) [IAM-COND].
IAM_CONDITION_OPERATORS = frozenset(
    (
        *(f"String{x}" for x in ("Equals", "NotEquals", "EqualsIgnoreCase", "NotEqualsIgnoreCase", "Like", "NotLike")),
        *(
            f"Numeric{x}"
            for x in ("Equals", "NotEquals", "LessThan", "LessThanEquals", "GreaterThan", "GreaterThanEquals")
        ),
        *(
            f"Date{x}"
            for x in ("Equals", "NotEquals", "LessThan", "LessThanEquals", "GreaterThan", "GreaterThanEquals")
        ),
        "Bool",
        "BinaryEquals",
        "IpAddress",
        "NotIpAddress",
        *(f"Arn{x}" for x in ("Equals", "Like", "NotEquals", "NotLike")),
    )
)


def condition_operator_problem(op: str) -> str | None:
    base = op.removeprefix("ForAllValues:").removeprefix("ForAnyValue:")
    if base == "Null" or base.removesuffix("IfExists") in IAM_CONDITION_OPERATORS:
        return None
    return (
        f"'{op}' is not an IAM condition operator; use one such as StringEquals, StringLike, ArnLike, "
        "NumericLessThan, DateGreaterThan, Bool, IpAddress or Null (optionally ForAnyValue:/ForAllValues: "
        "and ...IfExists)"
    )


def dot_segment_problem(path: str) -> str | None:
    """A '.' or '..' component: the path would not be the one a prefix check saw."""
    bad = next((c for c in path.split("/") if c in (".", "..")), None)
    if bad is None:
        return None
    return f"'{path}' has a '{bad}' component, so it is not the path it seems once resolved; write it without '{bad}'"


def ecr_host_problem(host: str) -> str | None:
    """An ECR host's region must exist, and its DNS suffix match the region's partition
    (amazonaws.com.cn only in China) [ECR-AUTH]."""
    m = ECR_HOST.match(host)
    if m is None:
        return None
    region, china = m.group(2), m.group(3) is not None
    if region not in REGIONS:
        return f"'{host}' names region '{region}', which is not an AWS region code; use the registry's region, e.g. 123456789012.dkr.ecr.us-east-2.amazonaws.com"
    if china != (partition_of(region) == "aws-cn"):
        want = "amazonaws.com.cn" if not china else "amazonaws.com"
        return f"'{host}': ECR hosts in {region} end in {want}; write {m.group(1)}.dkr.ecr.{region}.{want}"
    return None
