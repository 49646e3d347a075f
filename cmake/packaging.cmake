# `cpack -G DEB` (see deploy/build-deb.sh): one package, tensorbroker, with the daemon, the CLI,
# the client library and headers, the CMake and pkg-config files, the Python package, the systemd
# unit, sysusers.d/tmpfiles.d entries and /etc/tensorbroker/tensorbrokerd.conf (a conffile).
# Build it from a tree configured with -DCMAKE_INSTALL_PREFIX=/usr: the unit's ExecStart= and the
# Python directory are chosen at configure time.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tensorbroker)
set(CPACK_PACKAGE_VENDOR "tensorbroker")
set(CPACK_PACKAGE_CONTACT "tensorbroker maintainers <tensorbroker@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "shared-memory tensor broker (DLPack across processes)")
set(CPACK_PACKAGE_DESCRIPTION
    "tensorbrokerd owns CPU shared memory and CUDA device memory and publishes tensors by name
over gRPC on a Unix socket; clients (C++, Python, CLI) map the very same memory as DLPack
tensors, and memory is freed when no lease remains.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
# Files outside the prefix (/etc/tensorbroker) need the staging tree to be a DESTDIR.
set(CPACK_SET_DESTDIR ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # tensorbroker_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/tensorbroker/tensorbroker")
# Libraries the binaries link (libgrpc++, libprotobuf, libsystemd, ...) from dpkg-shlibdeps; our
# own private libraries are found in the build tree.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    ${PROJECT_BINARY_DIR}/proto ${PROJECT_BINARY_DIR}/client)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # and an ldconfig trigger
# procps: /bin/kill, the unit's ExecReload= (`systemctl reload tensorbrokerd`); minimal systems
# (debootstrap --variant=minbase, slim container images) lack it.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, procps")
if(TENSORBROKER_PYTHON_DEBIAN_DEPENDS)  # the extension is built for one Python minor version
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", ${TENSORBROKER_PYTHON_DEBIAN_DEPENDS}")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm
    ${PROJECT_BINARY_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
file(WRITE ${PROJECT_BINARY_DIR}/deploy/debian/conffiles "/etc/tensorbroker/tensorbrokerd.conf\n")
include(CPack)
