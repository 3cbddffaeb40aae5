//! LAIK's key-value store (`laik_kvs_*`) over the data layer's replicated store (D8).
//!
//! LAIK numbers entries in key order as of the last sync and appends entries set since then
//! at the end; a program may therefore add entries while it walks the synced ones by number.
//! The handle keeps that view; the data layer's store holds the values and does the sync.

use std::ffi::{c_char, c_uint, CStr, CString};
use std::ptr::null_mut;

use ferry_core::{Error, Result};
use ferry_data::kvs::KvStore;

use super::core::LaikInstance;
use super::{obj, out, run};

/// One entry as handed to C (`Laik_KVS_Entry`).
pub struct LaikKvsEntry {
    key: CString,
    data: Vec<u8>,
}

/// `laik_kvs_created_func` and `laik_kvs_changed_func`.
type EntryFn = unsafe extern "C" fn(*mut LaikKvs, *mut LaikKvsEntry);
/// `laik_kvs_removed_func`.
type RemovedFn = unsafe extern "C" fn(*mut LaikKvs, *mut c_char);

/// A key-value store shared by the processes of the world (`Laik_KVStore`).
pub struct LaikKvs {
    inst: *mut LaikInstance,
    store: KvStore,
    /// Boxed: C keeps entry pointers while it adds entries.
    #[allow(clippy::vec_box)]
    view: Vec<Box<LaikKvsEntry>>,
    /// Called after a sync for entries it created, changed or removed here
    /// (`laik_kvs_reg_callbacks`).
    on_created: Option<EntryFn>,
    on_changed: Option<EntryFn>,
    on_removed: Option<RemovedFn>,
}

/// What a sync changed in this process's view, in key order.
enum Change {
    Created(*mut LaikKvsEntry),
    Changed(*mut LaikKvsEntry),
    Removed(CString),
}

fn c_str(p: *const c_char, op: &'static str, what: &str) -> Result<String> {
    if p.is_null() {
        return Err(crate::ffi::null_arg(op, what));
    }
    // SAFETY: a NUL-terminated string from the program.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

impl LaikKvs {
    fn set(&mut self, key: String, value: Vec<u8>, op: &'static str) -> Result<*mut LaikKvsEntry> {
        self.store.set(&key, &value).map_err(|e| e.context(op))?;
        let ckey = CString::new(key).map_err(|_| Error::invalid(op, "key with a NUL byte"))?;
        let i = match self.view.iter().position(|e| e.key == ckey) {
            Some(i) => {
                self.view[i].data = value;
                i
            }
            None => {
                self.view.push(Box::new(LaikKvsEntry {
                    key: ckey,
                    data: value,
                }));
                self.view.len() - 1
            }
        };
        Ok(&mut *self.view[i] as *mut LaikKvsEntry)
    }

    fn rebuild(&mut self) -> Result<()> {
        let mut view = Vec::with_capacity(self.store.len());
        for (k, v) in self.store.iter() {
            let key = CString::new(k)
                .map_err(|_| Error::invalid("laik_kvs_sync", "key with a NUL byte"))?;
            view.push(Box::new(LaikKvsEntry {
                key,
                data: v.to_vec(),
            }));
        }
        self.view = view;
        Ok(())
    }
}

#[no_mangle]
pub extern "C" fn laik_kvs_new(name: *const c_char, inst: *mut LaikInstance) -> *mut LaikKvs {
    run("laik_kvs_new", || {
        obj(inst, "laik_kvs_new", "instance")?;
        let n = c_str(name, "laik_kvs_new", "name")?;
        Ok(Box::into_raw(Box::new(LaikKvs {
            inst,
            store: KvStore::new(n),
            view: Vec::new(),
            on_created: None,
            on_changed: None,
            on_removed: None,
        })))
    })
}

#[no_mangle]
pub extern "C" fn laik_kvs_free(kvs: *mut LaikKvs) {
    run("laik_kvs_free", || {
        if !kvs.is_null() {
            // SAFETY: from laik_kvs_new, freed once.
            drop(unsafe { Box::from_raw(kvs) });
        }
        Ok(())
    })
}

/// Sets `key` to the `size` bytes at `data`; other processes see it after the next sync.
#[no_mangle]
pub extern "C" fn laik_kvs_set(
    kvs: *mut LaikKvs,
    key: *const c_char,
    size: c_uint,
    data: *const c_char,
) -> *mut LaikKvsEntry {
    run("laik_kvs_set", || {
        let k = obj(kvs, "laik_kvs_set", "store")?;
        let key = c_str(key, "laik_kvs_set", "key")?;
        let value = if size == 0 {
            Vec::new()
        } else if data.is_null() {
            return Err(crate::ffi::null_arg("laik_kvs_set", "data"));
        } else {
            // SAFETY: the program passes `size` readable bytes at `data`.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size as usize) }.to_vec()
        };
        k.set(key, value, "laik_kvs_set")
    })
}

/// Sets `key` to the string `s` (with its terminating NUL).
#[no_mangle]
pub extern "C" fn laik_kvs_sets(
    kvs: *mut LaikKvs,
    key: *const c_char,
    s: *const c_char,
) -> *mut LaikKvsEntry {
    run("laik_kvs_sets", || {
        let k = obj(kvs, "laik_kvs_sets", "store")?;
        let key = c_str(key, "laik_kvs_sets", "key")?;
        if s.is_null() {
            return Err(crate::ffi::null_arg("laik_kvs_sets", "string"));
        }
        // SAFETY: a NUL-terminated string from the program.
        let v = unsafe { CStr::from_ptr(s) }.to_bytes_with_nul().to_vec();
        k.set(key, v, "laik_kvs_sets")
    })
}

/// Makes every process's changes visible to all processes of the current world (collective).
///
/// Then calls the program's callbacks (`laik_kvs_reg_callbacks`) for each entry the sync
/// created, changed or removed in this process's view, in key order: changes this process
/// made itself were in its view before and call nothing.
#[no_mangle]
pub extern "C" fn laik_kvs_sync(kvs: *mut LaikKvs) {
    let changes = run("laik_kvs_sync", || {
        let k = obj(kvs, "laik_kvs_sync", "store")?;
        let i = obj(k.inst, "laik_kvs_sync", "instance")?;
        // SAFETY: group handles live until the process ends.
        let g = unsafe { &*i.world_group }.group.clone();
        let watched = k.on_created.is_some() || k.on_changed.is_some() || k.on_removed.is_some();
        let before: std::collections::BTreeMap<CString, Vec<u8>> = if watched {
            k.view
                .iter()
                .map(|e| (e.key.clone(), e.data.clone()))
                .collect()
        } else {
            Default::default()
        };
        k.store.sync(i.transport()?, &g)?;
        k.rebuild()?;
        let mut changes = Vec::new();
        if watched {
            let mut after = std::collections::BTreeSet::new();
            for e in k.view.iter_mut() {
                after.insert(e.key.clone());
                match before.get(&e.key) {
                    None => changes.push(Change::Created(&mut **e as *mut LaikKvsEntry)),
                    Some(d) if *d != e.data => {
                        changes.push(Change::Changed(&mut **e as *mut LaikKvsEntry))
                    }
                    Some(_) => {}
                }
            }
            for key in before.into_keys().filter(|key| !after.contains(key)) {
                changes.push(Change::Removed(key));
            }
        }
        Ok(changes)
    });
    // Called after the store's borrow ended: a callback may call laik_kvs_* on this store.
    // SAFETY: `kvs` was checked above; the callbacks were registered by the program.
    let (created, changed, removed) =
        unsafe { ((*kvs).on_created, (*kvs).on_changed, (*kvs).on_removed) };
    for c in changes {
        match c {
            Change::Created(e) => {
                if let Some(f) = created {
                    // SAFETY: entries of the view stay valid until the next sync on the store
                    // or a removal (as LAIK documents for its entries); `f` is the program's.
                    unsafe { f(kvs, e) }
                }
            }
            Change::Changed(e) => {
                if let Some(f) = changed {
                    // SAFETY: as for created entries.
                    unsafe { f(kvs, e) }
                }
            }
            Change::Removed(key) => {
                if let Some(f) = removed {
                    // SAFETY: the key lives until the call returns.
                    unsafe { f(kvs, key.as_ptr().cast_mut()) }
                }
            }
        }
    }
}

/// Registers the functions `laik_kvs_sync` calls for entries it creates, changes or removes
/// in this process's view (any may be NULL).
#[no_mangle]
pub extern "C" fn laik_kvs_reg_callbacks(
    kvs: *mut LaikKvs,
    created: Option<EntryFn>,
    changed: Option<EntryFn>,
    removed: Option<RemovedFn>,
) {
    run("laik_kvs_reg_callbacks", || {
        let k = obj(kvs, "laik_kvs_reg_callbacks", "store")?;
        k.on_created = created;
        k.on_changed = changed;
        k.on_removed = removed;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_kvs_count(kvs: *mut LaikKvs) -> c_uint {
    run("laik_kvs_count", || {
        Ok(obj(kvs, "laik_kvs_count", "store")?.view.len() as c_uint)
    })
}

/// Entry number `n` (synced entries in key order, then entries set since; NULL past the end).
#[no_mangle]
pub extern "C" fn laik_kvs_getn(kvs: *mut LaikKvs, n: c_uint) -> *mut LaikKvsEntry {
    run("laik_kvs_getn", || {
        let k = obj(kvs, "laik_kvs_getn", "store")?;
        Ok(k.view
            .get_mut(n as usize)
            .map_or(null_mut(), |e| &mut **e as *mut LaikKvsEntry))
    })
}

/// The entry of `key` (NULL if there is none).
#[no_mangle]
pub extern "C" fn laik_kvs_entry(kvs: *mut LaikKvs, key: *const c_char) -> *mut LaikKvsEntry {
    run("laik_kvs_entry", || {
        let k = obj(kvs, "laik_kvs_entry", "store")?;
        let key = c_str(key, "laik_kvs_entry", "key")?;
        Ok(k.view
            .iter_mut()
            .find(|e| e.key.to_bytes() == key.as_bytes())
            .map_or(null_mut(), |e| &mut **e as *mut LaikKvsEntry))
    })
}

/// Removes `key` (everywhere after the next sync); whether it existed here.
#[no_mangle]
pub extern "C" fn laik_kvs_remove(kvs: *mut LaikKvs, key: *const c_char) -> bool {
    run("laik_kvs_remove", || {
        let k = obj(kvs, "laik_kvs_remove", "store")?;
        let key = c_str(key, "laik_kvs_remove", "key")?;
        let had = k.store.remove(&key)?;
        k.view.retain(|e| e.key.to_bytes() != key.as_bytes());
        Ok(had)
    })
}

/// Removes every entry (everywhere after the next sync).
#[no_mangle]
pub extern "C" fn laik_kvs_clean(kvs: *mut LaikKvs) {
    run("laik_kvs_clean", || {
        let k = obj(kvs, "laik_kvs_clean", "store")?;
        let keys: Vec<String> = k.store.iter().map(|(key, _)| key.to_string()).collect();
        for key in keys {
            k.store.remove(&key)?;
        }
        k.view.clear();
        Ok(())
    })
}

/// Orders the entries by key (they are after every sync).
#[no_mangle]
pub extern "C" fn laik_kvs_sort(kvs: *mut LaikKvs) {
    run("laik_kvs_sort", || {
        obj(kvs, "laik_kvs_sort", "store")?
            .view
            .sort_by(|a, b| a.key.cmp(&b.key));
        Ok(())
    })
}

/// Copies at most `size` bytes of an entry's value to `mem`; returns the bytes copied.
#[no_mangle]
pub extern "C" fn laik_kvs_copy(e: *mut LaikKvsEntry, mem: *mut c_char, size: c_uint) -> c_uint {
    run("laik_kvs_copy", || {
        let en = obj(e, "laik_kvs_copy", "entry")?;
        let n = en.data.len().min(size as usize);
        if n > 0 {
            if mem.is_null() {
                return Err(crate::ffi::null_arg("laik_kvs_copy", "mem"));
            }
            // SAFETY: the program passes `size` writable bytes at `mem`; n <= size.
            unsafe { std::ptr::copy_nonoverlapping(en.data.as_ptr(), mem.cast::<u8>(), n) };
        }
        Ok(n as c_uint)
    })
}

/// The value of `key` and its size (NULL if there is none).
#[no_mangle]
pub extern "C" fn laik_kvs_get(
    kvs: *mut LaikKvs,
    key: *const c_char,
    size: *mut c_uint,
) -> *mut c_char {
    let e = laik_kvs_entry(kvs, key);
    laik_kvs_data(e, size)
}

#[no_mangle]
pub extern "C" fn laik_kvs_key(e: *mut LaikKvsEntry) -> *mut c_char {
    run("laik_kvs_key", || {
        Ok(obj(e, "laik_kvs_key", "entry")?.key.as_ptr().cast_mut())
    })
}

#[no_mangle]
pub extern "C" fn laik_kvs_size(e: *mut LaikKvsEntry) -> c_uint {
    run("laik_kvs_size", || {
        Ok(obj(e, "laik_kvs_size", "entry")?.data.len() as c_uint)
    })
}

/// The value of an entry; its size goes to `*size` if `size` is not NULL.
#[no_mangle]
pub extern "C" fn laik_kvs_data(e: *mut LaikKvsEntry, size: *mut c_uint) -> *mut c_char {
    run("laik_kvs_data", || {
        if e.is_null() {
            return Ok(null_mut());
        }
        let en = obj(e, "laik_kvs_data", "entry")?;
        out(size, en.data.len() as c_uint);
        Ok(en.data.as_mut_ptr().cast::<c_char>())
    })
}
