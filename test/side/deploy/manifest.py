# The Kubernetes manifest against the image and itself (test/side/deploy.sh runs it with kubernetes-validate's
# Python, whose YAML parser is the one the schemas were checked with): the pods run as the image's USER, which is
# root, with commands as another user (the image's SANDBOXD_USER); no fsGroup; the token from a file of a Secret
# volume of mode 0400, never from the environment; the container port is the image's; a NetworkPolicy selects the
# pods, covers both directions and admits exactly that port. Prints what it found; exits 1 on any problem.
#   usage: python manifest.py MANIFEST DOCKERFILE
import re
import sys

import yaml

documents = {document["kind"]: document for document in yaml.safe_load_all(open(sys.argv[1]))}
dockerfile = re.sub(r"\\\n\s*", " ", open(sys.argv[2]).read())
runtime = dockerfile[dockerfile.rindex("\nFROM ") :].splitlines()
image_user = [line.split()[1] for line in runtime if line.startswith("USER ")][-1].split(":")[0]
image_env = dict(re.findall(r"(SANDBOXD_\w+)=(\S+)", " ".join(line for line in runtime if line.startswith("ENV "))))
commands_user = image_env.get("SANDBOXD_USER")

pod = documents["Deployment"]["spec"]["template"]
container = pod["spec"]["containers"][0]
security = pod["spec"]["securityContext"]
problems = []


def problem(text):
    problems.append(text)


if str(security.get("runAsUser")) != image_user:
    problem(f"runAsUser {security.get('runAsUser')} is not the image's USER {image_user}")
if image_user != "0" or commands_user in (None, "0", "root"):
    problem(f"the image runs its daemon as {image_user} and commands as {commands_user}: the daemon must be root, commands another user")
if "fsGroup" in security:
    problem("fsGroup makes the token's file group-readable")

env = {variable["name"]: variable for variable in container.get("env", [])}
if "SANDBOXD_TOKEN" in env:
    problem("the token comes from the environment, which the container's init keeps")
token_file = env.get("SANDBOXD_TOKEN_FILE", {}).get("value", "")
mounts = {mount["mountPath"]: mount["name"] for mount in container.get("volumeMounts", [])}
volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
secret = volumes.get(mounts.get(token_file.rsplit("/", 1)[0], ""), {}).get("secret")
if secret is None or secret.get("defaultMode") != 0o400:
    problem(f"SANDBOXD_TOKEN_FILE {token_file!r} is not in a Secret volume of mode 0400")

ports = {port["containerPort"] for port in container["ports"]}
if ports != {int(image_env["SANDBOXD_PORT"])}:
    problem(f"container ports {ports}, image port {image_env['SANDBOXD_PORT']}")

policy = documents.get("NetworkPolicy")
if policy is None:
    problem("no NetworkPolicy")
else:
    labels = pod["metadata"]["labels"]
    if any(labels.get(name) != value for name, value in policy["spec"]["podSelector"]["matchLabels"].items()):
        problem("the NetworkPolicy does not select the pods")
    if sorted(policy["spec"]["policyTypes"]) != ["Egress", "Ingress"]:
        problem("the NetworkPolicy does not cover both directions")
    admitted = {port["port"] for rule in policy["spec"].get("ingress", []) for port in rule.get("ports", [])}
    if admitted != ports:
        problem(f"the NetworkPolicy admits ports {admitted}, the pods listen on {ports}")

print("; ".join(problems) if problems else f"daemon as uid {image_user}, commands as {commands_user}, token from {token_file}, ports {ports}")
sys.exit(1 if problems else 0)
