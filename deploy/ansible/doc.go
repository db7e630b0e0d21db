// Package ansible holds no Go code: it is the Ansible playbook (site.yml)
// and roles (roles/palyra_node, roles/palyra_cluster) that install palyra
// nodes and pair them into one cluster. Its tests check the playbook with
// ansible-playbook and ansible-lint and run it, end to end, against three
// local "hosts" with a stand-in for systemctl (testdata/fake-systemctl).
package ansible
