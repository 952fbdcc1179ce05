# deploy/agent-sandbox/ against kubernetes-sigs/agent-sandbox's CRD schemas (agent-sandbox-crds/, as the project
# ships them in k8s/crds/), strictly: every object of the schema that lists its properties is closed (an unknown
# field is an error, as the API server's strict field validation makes it), and against the image and itself:
# the pod runs the image's user (root) with commands as another, the token from a root-only Secret file, the
# KEP-539.2 layout (--agent-sandbox) with its ports declared, probes on /v1/health, a managed NetworkPolicy that
# admits exactly sandboxd's three ports, and a warm pool of this template. Writes the pod template as a Pod to
# POD_OUT, for kubernetes-validate to check against the Kubernetes schemas. Prints what it found; exits 1 on any
# problem. A template with an unknown field must fail: checked too, so the strictness is itself tested.
#   usage: python agent_sandbox.py CRD_DIR DOCKERFILE POD_OUT MANIFEST...
import copy
import glob
import re
import sys

import jsonschema
import yaml

crd_dir, dockerfile_path, pod_out, *manifests = sys.argv[1:]
problems = []


def problem(text):
    problems.append(text)


def closed(schema):
    """The schema with every object that lists its properties closed to others."""
    if isinstance(schema, dict):
        schema = {key: closed(value) for key, value in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


schemas = {}
for path in glob.glob(f"{crd_dir}/*.yaml"):
    crd = yaml.safe_load(open(path))
    for version in crd["spec"]["versions"]:
        schema = closed(version["schema"]["openAPIV3Schema"])
        # metadata is the API server's (ObjectMeta): the CRD leaves it open.
        schema["properties"]["metadata"] = {"type": "object"}
        schemas[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = schema


def errors(document):
    schema = schemas.get((document.get("apiVersion"), document.get("kind")))
    if schema is None:
        return [f"no agent-sandbox CRD defines {document.get('apiVersion')} {document.get('kind')}"]
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'.'.join(map(str, error.absolute_path)) or '(root)'}: {error.message}" for error in validator.iter_errors(document)]


documents = [document for path in manifests for document in yaml.safe_load_all(open(path)) if document]
for document in documents:
    for text in errors(document):
        problem(f"{document['kind']} {document['metadata']['name']}: {text}")
    print(f"{document['kind']} {document['metadata']['name']}: checked against the CRD schema of {document['apiVersion']}")

templates = [document for document in documents if document["kind"] == "SandboxTemplate"]
pools = [document for document in documents if document["kind"] == "SandboxWarmPool"]
if len(templates) != 1 or len(pools) != 1:
    problem(f"expected one SandboxTemplate and one SandboxWarmPool, found {len(templates)} and {len(pools)}")
    print("\n".join(problems))
    sys.exit(1)
template, pool = templates[0], pools[0]

# The strictness is real: an unknown field, deep in the pod or at the top, is refused.
for where in (["spec", "podTemplate", "spec", "containers", 0], ["spec"]):
    broken = copy.deepcopy(template)
    target = broken
    for step in where:
        target = target[step]
    target["notAField"] = True
    if not errors(broken):
        problem(f"an unknown field at {'.'.join(map(str, where))} passed the check: it is not strict")

if pool["spec"]["sandboxTemplateRef"]["name"] != template["metadata"]["name"]:
    problem("the warm pool does not keep sandboxes of the template")

dockerfile = re.sub(r"\\\n\s*", " ", open(dockerfile_path).read())
runtime = dockerfile[dockerfile.rindex("\nFROM ") :].splitlines()
image_user = [line.split()[1] for line in runtime if line.startswith("USER ")][-1].split(":")[0]
image_env = dict(re.findall(r"(SANDBOXD_\w+)=(\S+)", " ".join(line for line in runtime if line.startswith("ENV "))))

pod = template["spec"]["podTemplate"]
container = pod["spec"]["containers"][0]
security = pod["spec"]["securityContext"]
if str(security.get("runAsUser")) != image_user or image_env.get("SANDBOXD_USER") in (None, "0", "root"):
    problem("the daemon must run as the image's USER (root) and its commands as another user (SANDBOXD_USER)")
if "fsGroup" in security:
    problem("fsGroup makes the token's file group-readable")
if pod["spec"].get("automountServiceAccountToken") is not False:
    problem("commands would get the service account's token")
env = {variable["name"]: variable for variable in container.get("env", [])}
if "SANDBOXD_TOKEN" in env:
    problem("the token comes from the environment, which the container's init keeps")
token_file = env.get("SANDBOXD_TOKEN_FILE", {}).get("value", "")
mounts = {mount["mountPath"]: mount["name"] for mount in container.get("volumeMounts", [])}
volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes", [])}
secret = volumes.get(mounts.get(token_file.rsplit("/", 1)[0], ""), {}).get("secret")
if secret is None or secret.get("defaultMode") != 0o400:
    problem(f"the token file {token_file!r} is not in a Secret volume of mode 0400")
if "--agent-sandbox" not in container.get("args", []):
    problem("the daemon is not told --agent-sandbox (KEP-539.2's ports)")
ports = sorted(port["containerPort"] for port in container.get("ports", []))
if ports != [7007, 8080, 9090]:
    problem(f"the container declares ports {ports}, not sandboxd's 7007 and the KEP's 9090 and 8080")
for probe in ("readinessProbe", "startupProbe"):
    check = container.get(probe, {}).get("httpGet", {})
    if (check.get("path"), check.get("port")) != ("/v1/health", 8080):
        problem(f"{probe} does not ask KEP-539.2's /v1/health on 8080")
if any(name.startswith("SANDBOX_") and any(mark in name for mark in ("TOKEN", "SECRET", "KEY", "PASSWORD")) for name in env):
    problem("a SANDBOX_ variable looks like a credential: /v1/metadata would withhold it, and it should not be there")
policy = template["spec"].get("networkPolicy", {})
if template["spec"].get("networkPolicyManagement", "Managed") != "Managed" or not policy.get("ingress") or not policy.get("egress"):
    problem("the sandboxes need a managed NetworkPolicy covering both directions")
admitted = sorted(port["port"] for rule in policy.get("ingress", []) for port in rule.get("ports", []))
if admitted != [7007, 8080, 9090]:
    problem(f"the NetworkPolicy admits ports {admitted}, not exactly sandboxd's three")

with open(pod_out, "w") as out:
    yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sandboxd-template", **pod.get("metadata", {})}, "spec": pod["spec"]}, out)

print("\n".join(problems) if problems else "the template, its pod and the warm pool are what sandboxd needs")
sys.exit(1 if problems else 0)
