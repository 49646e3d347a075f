// TENSORBROKER_EXPORT marks what libtensorbroker_client exports: the classes and functions of
// these public headers. The library is built with hidden visibility, so everything else in it
// (client_internal, gRPC and protobuf code, Abseil instantiations) stays out of its dynamic
// symbol table and cannot be linked against (tests/package_consumer/check_exports.sh checks the
// installed library).
#ifndef TENSORBROKER_EXPORT_H_
#define TENSORBROKER_EXPORT_H_

#define TENSORBROKER_EXPORT __attribute__((visibility("default")))
// For the library's own definitions of what an exported class declares only (its Impl): a
// nested class takes its enclosing class's visibility otherwise.
#define TENSORBROKER_HIDDEN __attribute__((visibility("hidden")))

#endif  // TENSORBROKER_EXPORT_H_
