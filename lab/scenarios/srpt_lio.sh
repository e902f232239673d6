# The kernel SRP target in a guest: LIO (target_core_*) + ib_srpt configured through configfs,
# listening on the RDMA CM. Sourced by a guest script (busybox sh) after lib.sh:
#   srpt_lio_target PORT SIZE ACL...   e.g. srpt_lio_target 5555 16777216 10.77.0.10
# - backstore: a FILEIO file of SIZE bytes on the guest's tmpfs (/tmp/lio-disk0.img)
# - target port: ib_srpt names rxe0's port by its GID interface ID, colon form
#   (`/sys/class/infiniband/rxe0/node_guid`, e.g. 5054:00ff:fe77:000a for guest A); the
#   initiator's add_target needs that GUID as id_ext and ioc_guid
# - LUN 0 = the backstore; one node ACL per name given, each mapping LUN 0
# - ACL names, 6.1 quirk: an RDMA CM login on a GUID-named port is matched against
#   "%pIS" of the passive id's route.addr.src_addr, i.e. the *target's own* address (A's
#   10.77.0.10), not the initiator's; the 0x<initiator port id> form is only tried on a
#   GID-named port. An ACL for the initiator's address alone is refused with
#   SRP_LOGIN_REJ 0x00010006.
# - rdma_cm_port (discovery_auth): writing the port creates ib_srpt's RDMA CM listener
srpt_lio_target() {
  _port=$1; _size=$2; shift 2
  modprobe target_core_file; modprobe ib_srpt
  _cfg=/sys/kernel/config/target
  _guid=$(cat /sys/class/infiniband/rxe0/node_guid)
  mkdir -p $_cfg/core/fileio_0/disk0
  echo "fd_dev_name=/tmp/lio-disk0.img,fd_dev_size=$_size" > $_cfg/core/fileio_0/disk0/control
  echo 1 > $_cfg/core/fileio_0/disk0/enable
  _tpg=$_cfg/srpt/$_guid/tpgt_1
  mkdir -p $_tpg/lun/lun_0
  ln -s $_cfg/core/fileio_0/disk0 $_tpg/lun/lun_0/disk0
  for _acl in "$@"; do
    mkdir -p $_tpg/acls/$_acl/lun_0 && ln -s $_tpg/lun/lun_0 $_tpg/acls/$_acl/lun_0/lun0
  done
  echo 1 > $_tpg/enable
  echo "$_port" > $_cfg/srpt/discovery_auth/rdma_cm_port
  SRPT_GUID=$(echo "$_guid" | tr -d ':')
  echo "ib_srpt: target port $_guid, rdma_cm_port $(cat $_cfg/srpt/discovery_auth/rdma_cm_port)"
}
