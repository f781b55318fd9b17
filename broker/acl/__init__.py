"""Access control of the bundled broker (broker.conf `aclEnable=true`), as Apache RocketMQ 4.9's plain ACL.

`accounts` reads the accounts file (Apache's plain_acl.yml format), `addresses` its white-list
patterns, `permission` the permission words, `resources` what each request code needs,
`validator` the check in Apache's order, `guard` the step that runs it before every processor and
`watcher` the reload of a changed file. docs/security.md describes it for operators.
"""
