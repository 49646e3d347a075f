// Whether this test binary is built with ThreadSanitizer (GCC's __SANITIZE_THREAD__ or clang's
// __has_feature), for the few bounds that TSan's own bookkeeping changes: the runtime's shadow
// and sync metadata count in a process's RssAnon.
#ifndef TENSORBROKER_TESTS_SUPPORT_SANITIZER_BUILD_H_
#define TENSORBROKER_TESTS_SUPPORT_SANITIZER_BUILD_H_

namespace tensorbroker::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_SANITIZER_BUILD_H_
