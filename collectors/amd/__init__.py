"""AMD GPUs without ROCm: the amdgpu driver's sysfs and DRM fdinfo, plus an optional amdsmi backend."""
