//! The four observers. (Skeleton: being written.)
